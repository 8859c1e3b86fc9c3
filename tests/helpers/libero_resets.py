"""Episodes of one LIBERO task through the project's soft resets and through robosuite's hard resets, compared.

Run as `python -m tests.helpers.libero_resets <suite> <task_id>` (a process imports one LIBERO: standard or PRO);
prints one JSON line: how many arrays each side observed, how many differ, and whether each side kept its simulator.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

from lerobot_hydra.envs.libero import LiberoEnvConfig

EPISODES = (0, 1, 7)
STEPS = 25


def episodes(config: LiberoEnvConfig, hard: bool) -> tuple[list[np.ndarray], bool]:
    """Every array observed over EPISODES (random actions, the same on both sides); whether the simulator was kept."""
    env = config.build(config.tasks()[0], render=False)
    # robosuite's own switch: back to rebuilding the model, simulator and renderer at every reset.
    env._env.env.hard_reset = hard
    rng = np.random.default_rng(0)
    arrays: list[np.ndarray] = []
    sims = set()
    for episode in EPISODES:
        observation, _ = env.reset(seed=1000 + episode, options={"episode_index": episode})
        sims.add(id(env._env.sim))
        arrays += flatten(observation)
        for _ in range(STEPS):
            observation, reward, terminated, _, _ = env.step(rng.uniform(-1, 1, 7))
            arrays += [*flatten(observation), np.asarray(reward), np.asarray(terminated)]
    env.close()
    return arrays, len(sims) == 1


def flatten(observation: Any) -> list[np.ndarray]:
    if isinstance(observation, dict):
        return [array for key in sorted(observation) for array in flatten(observation[key])]
    return [np.asarray(observation)]


def main(suite: str, task_id: int) -> None:
    config = LiberoEnvConfig(task=suite, task_ids=[task_id], observation_height=64, observation_width=64)
    soft, soft_kept = episodes(config, hard=False)
    hard, hard_kept = episodes(config, hard=True)
    differ = sum(a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(soft, hard, strict=True))
    print(json.dumps({"arrays": len(soft), "differ": differ, "soft_kept_sim": soft_kept, "hard_kept_sim": hard_kept}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
