"""A tiny deterministic env for LeRobot policies whose episodes end at different steps: the state drifts by each
action, the reward is the state's first coordinate (so an episode's rewards record every action it took), and
episode k of task i lasts 3 + (7k + 4i) mod 11 steps (task 0: 3, 10, 6, 13, 9, 5, ...), so sub-envs finish apart
and refill. Tasks differ in their language instruction (which SmolVLA reads), start offset and lengths, so an
episode run as another task's would show in its record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.processors.observation import LeRobotLayout, MapObservationKeys, ToNumpyAction

FEATURES_MAP = {"agent_pos": "observation.state", "environment_state": "observation.environment_state"}
STATE_DIM, ENV_STATE_DIM, ACTION_DIM, IMAGE_SIZE = 4, 6, 4, 32
# The tiny checkpoints' features for this env (see devkit/lerobot_checkpoints.py).
DRIFT_STATE = {"observation.state": ("STATE", (STATE_DIM,)), "observation.environment_state": ("ENV", (ENV_STATE_DIM,))}
DRIFT_PIXELS = {"observation.image": ("VISUAL", (3, IMAGE_SIZE, IMAGE_SIZE)), "observation.state": ("STATE", (4,))}
DRIFT_ACTION = (ACTION_DIM, 0.0, 0.05)
# Words of the tiny SmolVLA's vocabulary (devkit/lerobot_checkpoints.py).
TASK_TEXTS = ("reach a goal position", "pick and place the block", "open the drawer")


def _processors() -> dict[str, list[Any]]:
    features_map = {**FEATURES_MAP, "pixels": "observation.image"}
    return {"pre": [MapObservationKeys(features_map), LeRobotLayout()], "post": [ToNumpyAction()]}


@dataclass
class DriftEnvConfig(EnvConfig):
    n_tasks: int = 1
    pixels: bool = False  # a camera image too (SmolVLA reads one)
    processors: dict[str, list[Any]] = field(default_factory=_processors)

    def tasks(self) -> list[TaskSpec]:
        length = self.episode_length or 30
        return [TaskSpec("drift", i, f"drift-{i}", TASK_TEXTS[i % 3], length) for i in range(self.n_tasks)]

    def spaces(self, task: TaskSpec) -> tuple[Any, Any]:
        from gymnasium import spaces

        observation = {
            "agent_pos": spaces.Box(-1e6, 1e6, (STATE_DIM,), np.float64),
            "environment_state": spaces.Box(-1e6, 1e6, (ENV_STATE_DIM,), np.float64),
        }
        if self.pixels:
            observation["pixels"] = spaces.Box(0, 255, (IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
        return spaces.Dict(observation), spaces.Box(-1, 1, (ACTION_DIM,), np.float32)

    def build(self, task: TaskSpec, render: bool) -> Any:
        return DriftEnv(self.pixels, task.task_id)


def episode_length(k: int, task_id: int = 0) -> int:
    return 3 + (7 * k + 4 * task_id) % 11


class DriftEnv:
    def __init__(self, pixels: bool, task_id: int = 0) -> None:
        self.pixels = pixels
        self.task_id = task_id
        self.state = np.zeros(STATE_DIM)
        self.length = self.steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        obs = {"agent_pos": self.state.copy(), "environment_state": np.concatenate([self.state, self.state[:2] ** 2])}
        if self.pixels:
            obs["pixels"] = self.render()
        return obs

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.state = np.random.default_rng(seed).uniform(-0.5, 0.5, STATE_DIM) + 0.25 * self.task_id
        self.length, self.steps = episode_length((options or {}).get("episode_index", 0), self.task_id), 0
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        self.state = self.state + 10 * np.asarray(action, np.float64)
        self.steps += 1
        done = self.steps >= self.length
        return self._obs(), float(self.state[0]), done, False, {"is_success": done and bool(self.state[1] > 0)}

    def render(self) -> np.ndarray:
        shade = np.clip(128 + 100 * self.state[:3], 0, 255).astype(np.uint8)
        return np.broadcast_to(shade, (IMAGE_SIZE, IMAGE_SIZE, 3)).copy()

    def close(self) -> None:
        pass
