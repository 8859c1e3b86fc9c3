"""The contract between the rollout and the vector envs: the keys of reset options and infos.

A sub-env is told which episode to start through `VectorEnv.reset(options=...)` and reports, per step, whether
its episode is done and succeeded. These names are the whole protocol; the runner, the vector envs and the
autotune probe import them from here.
"""

from __future__ import annotations

# Per-slot reset option: entry i is `(episode_index, seed)` for sub-env i, or None (it stays idle).
EPISODES_KEY = "episodes"
# Reset option: which sub-envs to reset (the others keep running untouched); absent: all of them.
RESET_MASK_KEY = "reset_mask"
# Reset info key of the benchmark's initial-state id for the episode (-1: the benchmark has none).
INIT_STATE_KEY = "init_state_id"
# Step info keys, one entry per sub-env: the episode ended at this step / it has succeeded by this step.
DONE_KEY = "done"
SUCCESS_KEY = "is_success"
