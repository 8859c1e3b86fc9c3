"""Loading the policy while the workers build their first simulators, vs loading it first.

    python -m speed.startup_overlap        # needs the libero and lerobot extras

A tiny ACT (ResNet-18 backbone, two 64x64 cameras and LIBERO's 8-D state, built locally and saved with its
processors) on LIBERO libero_spatial task 0, 2 episodes of 10 steps, batch 2, async. Both sides are fresh
processes timed from start to exit, driving `lanes.evaluate` the same way except for the policy argument:
the built policy (load, then start the workers: the order before this change) or the function that builds it
(`eval.py`'s way: the workers start and build their simulators, ~10 s each for LIBERO, while LeRobot is
imported and the checkpoint loaded). The records must be identical. Target >= 1.1x.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from speed.harness.timing import timed_python, verdict

LIBERO_TINY_ACT = {
    "observation.images.image": ("VISUAL", (3, 64, 64)),
    "observation.images.image2": ("VISUAL", (3, 64, 64)),
    "observation.state": ("STATE", (8,)),
}
SNIPPET = """
import functools, json, sys
from lerobot_hydra.app.autotune import compose
from lerobot_hydra.vector.worker_servers import ServerLease
from lerobot_hydra.schemas.schema import instantiate_node
from lerobot_hydra.core.gl import configure_mujoco_gl
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.lanes import LaneSettings, evaluate
from lerobot_hydra.rollout.runner import TaskWork

if __name__ == "__main__":
    configure_mujoco_gl()
    cfg = compose({overrides!r})
    env_cfg, policy_cfg = instantiate_node(cfg.env), instantiate_node(cfg.policy)
    ServerLease().prestart(env_cfg)
    build = functools.partial(policy_cfg.build, env_cfg, "cpu")
    records = []
    settings = LaneSettings(env_cfg, *env_cfg.build_processors(), base_seed=1000, batch_size=2, use_async=True)
    evaluate(
        settings, [TaskWork(t, [0, 1]) for t in env_cfg.tasks()], build if {overlap} else (lambda built=build(): built),
        on_record=records.append, progress=Progress(600.0, tty=False),
    )
    print(json.dumps(sorted([r.episode_index, r.steps, r.sum_reward] for r in records)))
"""


def main() -> int:
    from devkit.lerobot_checkpoints import tiny_act

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = tiny_act(Path(tmp) / "act_libero", LIBERO_TINY_ACT, (7, 0.0, 0.1))
        overrides = [
            "env=libero",
            "env.task=libero_spatial",
            "env.task_ids=[0]",
            "env.observation_height=64",
            "env.observation_width=64",
            "env.episode_length=10",
            "policy=act",
            f"policy.path={checkpoint}",
        ]
        times: dict[bool, list[float]] = {True: [], False: []}
        results = {}
        for overlap in (True, False, True, False):
            code = SNIPPET.format(overrides=overrides, overlap=overlap)
            elapsed, results[overlap] = timed_python(code)
            times[overlap].append(elapsed)
    first, overlapped = min(times[False]), min(times[True])
    same = results[True] == results[False]
    ok = verdict(
        "policy loaded while the workers build their simulators vs before",
        first / overlapped,
        1.1,
        f"best of 2 each: {first:.1f} s vs {overlapped:.1f} s; identical records: {same} ({json.dumps(results[True])})",
    )
    return 0 if ok and same else 1


if __name__ == "__main__":
    sys.exit(main())
