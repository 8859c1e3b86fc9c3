"""Random actions from the env's action space, reproducible per episode whatever the batch size."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.policies.base import PolicyConfig, RowResettablePolicy

# Keeps the policy's random stream apart from the simulator's, which is seeded with the same episode seed.
SEED_OFFSET = 7919


@dataclass
class RandomPolicyConfig(PolicyConfig):
    def reads(self, env: EnvConfig) -> set[str]:
        return set()

    def resets_rows(self) -> bool:
        return True

    def build(self, env: EnvConfig, device: str) -> RandomPolicy:
        _, action_space = env.spaces(env.tasks()[0])
        return RandomPolicy(action_space)


class RandomPolicy(RowResettablePolicy):
    def __init__(self, action_space: Any) -> None:
        self.action_space = action_space
        self._spaces: list[Any] = []

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        self._spaces = [self._space(seed) for seed in episode_seeds]

    def reset_slots(self, task: TaskSpec, seeds: dict[int, int | None]) -> None:
        for row, seed in seeds.items():
            self._spaces[row] = self._space(seed)

    def _space(self, seed: int | None) -> Any:
        """The row's own action space, seeded from its episode; None for an idle row."""
        if seed is None:
            return None
        space = copy.deepcopy(self.action_space)
        space.seed(seed + SEED_OFFSET)
        return space

    def select_action(self, batch: dict[str, Any]) -> np.ndarray:
        idle = np.zeros(self.action_space.shape, self.action_space.dtype)
        return np.stack([idle if space is None else space.sample() for space in self._spaces])

    def fork(self) -> RandomPolicy:
        return RandomPolicy(self.action_space)
