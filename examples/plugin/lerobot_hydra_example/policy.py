"""policy=example_pd: a proportional controller towards the target in the observation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.policies.base import Policy, PolicyConfig


@dataclass
class PDPolicyConfig(PolicyConfig):
    gain: float = 0.5

    def reads(self, env: EnvConfig) -> set[str]:
        return {"observation.state"}

    def build(self, env: EnvConfig, device: str) -> PDPolicy:
        return PDPolicy(self.gain)


class PDPolicy(Policy):
    def __init__(self, gain: float) -> None:
        self.gain = gain

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        pass

    def select_action(self, batch: dict[str, Any]) -> np.ndarray:
        state = np.asarray(batch["observation.state"], dtype=np.float64)
        return (self.gain * (state[:, 1:2] - state[:, 0:1])).astype(np.float32)

    def fork(self) -> PDPolicy:
        return PDPolicy(self.gain)

    def finish(self) -> None:
        pass
