"""PushT (gym-pusht) through the Gymnasium path, its image drawn only on the steps whose observation is read.

gym-pusht draws its observation image (a 512x512 pygame scene resized to 96x96) inside `step`, in `get_obs()`,
which reads the env's `obs_type`: about three quarters of a step's time. On an unread step the env is asked, for
that step only, for the observation type without the image; the image is then zeros (nothing reads it). The physics,
reward and success do not depend on the observation type, and videos are drawn apart by `render()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobot_hydra.envs.base import DrawsOnDemand, TaskSpec
from lerobot_hydra.envs.gym import GymEnvConfig, GymTaskEnv

# gym-pusht's observation types with an image -> the same without it.
WITHOUT_IMAGE = {"pixels_agent_pos": "environment_state_agent_pos", "pixels": "state"}


@dataclass
class PushTEnvConfig(GymEnvConfig):
    def build(self, task: TaskSpec, render: bool) -> PushTTaskEnv:
        return PushTTaskEnv(self, task, render)


class PushTTaskEnv(GymTaskEnv, DrawsOnDemand):
    def __init__(self, config: GymEnvConfig, task: TaskSpec, render: bool) -> None:
        super().__init__(config, task, render)
        self._draw = True  # the next step draws the image (`draw_next` holds for one step)
        space = self._env.observation_space
        self._image_shape = (space["pixels"] if hasattr(space, "spaces") else space).shape

    def draw_next(self, observation: bool, film: bool) -> None:
        self._draw = observation

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        pusht = self._env.unwrapped
        drawn = pusht.obs_type
        skipped = not self._draw and drawn in WITHOUT_IMAGE
        if skipped:
            pusht.obs_type = WITHOUT_IMAGE[drawn]
        try:
            obs, reward, terminated, truncated, info = super().step(action)
        finally:
            pusht.obs_type, self._draw = drawn, True
        if skipped:
            blank = np.zeros(self._image_shape, np.uint8)
            obs = {"pixels": blank, "agent_pos": obs["agent_pos"]} if drawn == "pixels_agent_pos" else blank
        return obs, reward, terminated, truncated, info
