"""env=example_line: a point on a line is moved to a target; each task is one target."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_hydra.envs.base import EnvConfig, TaskSpec

TOLERANCE = 0.05


@dataclass
class LineEnvConfig(EnvConfig):
    # One task per target position.
    targets: list[float] = field(default_factory=lambda: [0.5, -0.5])
    episode_length: int | None = 50

    def tasks(self) -> list[TaskSpec]:
        return [
            TaskSpec("line", i, f"target{i}", f"move the point to {target}", self.episode_length or 50)
            for i, target in enumerate(self.targets)
        ]

    def spaces(self, task: TaskSpec) -> tuple[Any, Any]:
        from gymnasium import spaces

        observation = spaces.Dict({"agent_pos": spaces.Box(-np.inf, np.inf, (2,), np.float64)})
        return observation, spaces.Box(-0.1, 0.1, (1,), np.float32)

    def build(self, task: TaskSpec, render: bool) -> LineTaskEnv:
        return LineTaskEnv(self.targets[task.task_id])


class LineTaskEnv:
    def __init__(self, target: float) -> None:
        self.target = target
        self.x = 0.0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"agent_pos": np.array([self.x, self.target])}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        self.x = float(np.random.default_rng(seed).uniform(-1.0, 1.0))
        return self._obs(), {"is_success": False}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.x += float(np.clip(np.asarray(action).reshape(-1)[0], -0.1, 0.1))
        success = abs(self.x - self.target) < TOLERANCE
        return self._obs(), -abs(self.x - self.target), success, False, {"is_success": success}

    def render(self) -> Any:
        frame = np.zeros((32, 64, 3), np.uint8)
        frame[:, int(np.clip((self.x + 1) * 31.5, 0, 63))] = 255
        return frame

    def close(self) -> None:
        pass
