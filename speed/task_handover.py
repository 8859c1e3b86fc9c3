"""Building the next task's simulators on sub-envs idle at a task's end, vs building them at its first reset.

    python -m speed.task_handover          # needs the libero extra

LIBERO libero_spatial tasks 0-2, random policy (never succeeds, so every episode runs its full length),
64x64 cameras, 5 episodes of 30 steps per task, batch 4 on this 2-core machine, async: in each task's last
batch three sub-envs have no episode, and they build the next task's simulators (~10 s each) while the fourth
runs the last episode. That pays when workers outnumber cores; at batch = cores the simulators are built in
parallel at the next task's start anyway (see speed/README.md). The baseline is the same run with the
hand-over switched off (a no-op patched in), in this process with the same imports; ours runs first, paying
the process's one-time costs. The records must be identical. Target >= 1.1x.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from speed.harness.timing import verdict

os.environ.setdefault("MUJOCO_GL", "osmesa")

from lerobot_hydra.app.autotune import compose
from lerobot_hydra.rollout.lanes import LaneSettings, evaluate
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.runner import TaskWork
from lerobot_hydra.schemas.schema import instantiate_node
from lerobot_hydra.vector.slot_vector import SlotVectorEnv

OVERRIDES = [
    "env=libero",
    "env.task=libero_spatial",
    "env.task_ids=[0,1,2]",
    "env.observation_height=64",
    "env.observation_width=64",
    "env.episode_length=30",
    "policy=random",
]
EPISODES, BATCH = 5, 4


def run(handover: bool) -> tuple[float, list[tuple]]:
    cfg = compose(OVERRIDES)
    env_cfg = instantiate_node(cfg.env)
    policy = instantiate_node(cfg.policy).build(env_cfg, "cpu")
    pre, post = env_cfg.build_processors()
    records: list[Any] = []
    original = SlotVectorEnv.start_call
    if not handover:
        SlotVectorEnv.start_call = lambda self, index, name, *args: None  # type: ignore[method-assign]
    try:
        start = time.perf_counter()
        evaluate(
            LaneSettings(env_cfg, pre, post, 1000, BATCH, True, 1),
            [TaskWork(t, list(range(EPISODES))) for t in env_cfg.tasks()],
            lambda: policy,
            on_record=records.append,
            progress=Progress(600.0, tty=False),
        )
        wall = time.perf_counter() - start
    finally:
        SlotVectorEnv.start_call = original  # type: ignore[method-assign]
    outcomes = sorted((r.unit, r.seed, r.init_state_id, r.steps, r.success, r.sum_reward) for r in records)
    return wall, outcomes


def main() -> int:
    # Ours first: the first run in a process also pays for one-time costs (forkserver start, cold caches).
    with_s, with_ = run(handover=True)
    without_s, without = run(handover=False)
    same = without == with_
    ok = verdict(
        "next task's simulators built during the current task's last episode vs at its first reset",
        without_s / with_s,
        1.1,
        f"LIBERO, 3 tasks x {EPISODES} episodes of 30 steps, batch {BATCH}: {without_s:.1f} s vs {with_s:.1f} s; "
        f"identical records: {same}",
    )
    return 0 if ok and same else 1


if __name__ == "__main__":
    sys.exit(main())
