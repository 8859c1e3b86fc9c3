"""A tiny Gymnasium env that is broken on purpose, registered on import (`env.package=tests.helpers.broken_env`):
episodes reset with an odd seed get a NaN reward at their second step (NanReward-v0), or raise at their third
(Unstable-v0); MissingAsset-v0 raises at every reset."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class NanRewardEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._broken, self._steps = seed is not None and seed % 2 == 1, 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._steps += 1
        reward = float("nan") if self._broken and self._steps == 2 else 1.0
        return np.zeros(2, np.float32), reward, False, False, {"is_success": False}


gym.register("NanReward-v0", entry_point=NanRewardEnv, max_episode_steps=5)


class UnstableEnv(NanRewardEnv):
    """Episodes reset with an odd seed raise at their third step, as a simulator going unstable does."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self._broken and self._steps == 2:
            raise FloatingPointError("mujoco: simulation unstable (qacc is NaN)")
        self._steps += 1
        return np.zeros(2, np.float32), 1.0, False, False, {"is_success": False}


gym.register("Unstable-v0", entry_point=UnstableEnv, max_episode_steps=5)


class MissingAssetEnv(NanRewardEnv):
    """Every reset raises, as a simulator whose asset file is missing does."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        raise FileNotFoundError("missing asset: /nowhere/scene.xml")


gym.register("MissingAsset-v0", entry_point=MissingAssetEnv, max_episode_steps=5)
