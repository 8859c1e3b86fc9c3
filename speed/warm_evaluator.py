"""The second of several evaluations through a warm `lerobot_hydra.Evaluator` vs the same evaluation through the
command line on a saved checkpoint (what a training loop paid before the Python API: save, a fresh process,
reload, fresh workers and simulators).

    python -m speed.warm_evaluator                    # LIBERO (libero and lerobot extras), 2 tasks x 2 episodes
    python -m speed.warm_evaluator --env metaworld    # MetaWorld state, 2 tasks x 2 episodes

A tiny ACT (devkit/lerobot_checkpoints.py; for LIBERO a ResNet-18 backbone on two 64x64 cameras and the
8-D state) is built in memory, seeded. CLI side: the policy saved as a checkpoint, then `python eval.py
policy=act policy.path=<it>` timed from the save to the process's exit. API side: a fresh process makes the same
policy and one `Evaluator`, evaluates it three times and reports each evaluation's wall time; the second is
compared. Both sides' episodes must be identical. Target >= 3x.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from speed.harness.timing import timed_eval, timed_python, verdict

LIBERO_TINY_ACT = {
    "observation.images.image": ("VISUAL", (3, 64, 64)),
    "observation.images.image2": ("VISUAL", (3, 64, 64)),
    "observation.state": ("STATE", (8,)),
}
SETUPS = {
    "libero": (
        "LIBERO_TINY_ACT",
        (7, 0.0, 0.1),
        [
            "env=libero",
            "env.task=libero_spatial",
            "env.task_ids=[0,1]",
            "env.observation_height=64",
            "env.observation_width=64",
            "env.episode_length=20",
        ],
    ),
    "metaworld": (
        "METAWORLD_STATE",
        (4, 0.0, 0.05),
        ["env=metaworld", "env.task=[reach-v3,push-v3]", "env.obs_type=state", "env.episode_length=100"],
    ),
}
COMMON = ["eval.n_episodes=2", "eval.batch_size=2", "eval.max_episodes_rendered=0"]
SNIPPET = """
import json, sys, time
from devkit.lerobot_checkpoints import TINY_ACT, build_policy
import lerobot_hydra

if __name__ == "__main__":
    policy, pre, post = build_policy("act", {features!r}, {action!r}, **TINY_ACT)
    walls, outcomes = [], []
    with lerobot_hydra.Evaluator({overrides!r}) as evaluator:
        for step in range(3):
            start = time.perf_counter()
            results = evaluator.evaluate(policy, preprocessor=pre, postprocessor=post, step=step)
            walls.append(time.perf_counter() - start)
            episodes = results.episodes
            outcomes.append(sorted([r.task_id, r.episode_index, r.steps, r.success, r.sum_reward] for r in episodes))
    print(json.dumps([walls, outcomes]))
"""


def features(env: str) -> dict:
    from devkit import lerobot_checkpoints

    name = SETUPS[env][0]
    return LIBERO_TINY_ACT if name == "LIBERO_TINY_ACT" else getattr(lerobot_checkpoints, name)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", choices=sorted(SETUPS), default="libero")
    args = parser.parse_args()
    from devkit.lerobot_checkpoints import TINY_ACT, build_policy, save_policy

    _, action, env_overrides = SETUPS[args.env]
    overrides = [*env_overrides, *COMMON]
    code = SNIPPET.format(features=features(args.env), action=action, overrides=overrides)
    _, (walls, api_outcomes) = timed_python(code)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        policy, pre, post = build_policy("act", features(args.env), action, **TINY_ACT)
        checkpoint = save_policy(Path(tmp) / "act", policy, pre, post)
        _, info = timed_eval(*overrides, "policy=act", f"policy.path={checkpoint}")
        cli_wall = time.perf_counter() - start  # the save counted too
    cli_outcomes = sorted(
        [t["task_id"], k, None, s, r]
        for t in info["per_task"]
        for k, (s, r) in enumerate(zip(t["metrics"]["successes"], t["metrics"]["sum_rewards"], strict=True))
    )
    api = sorted([o[0], o[1], None, o[3], o[4]] for o in api_outcomes[1])
    same = api == cli_outcomes and api_outcomes[0] == api_outcomes[1] == api_outcomes[2]
    ok = verdict(
        f"{args.env}: a warm Evaluator's second evaluation vs eval.py on the saved checkpoint",
        cli_wall / walls[1],
        3.0,
        f"CLI {cli_wall:.1f} s; Evaluator {', '.join(f'{w:.1f}' for w in walls)} s (first, second, third); "
        f"identical episodes: {same}",
    )
    return 0 if ok and same else 1


if __name__ == "__main__":
    sys.exit(main())
