"""Envs that fail on chosen episodes, for the error-episode tests and the soak (speed/soak_errors.py).

`env._target_=devkit.faulty_env.FaultyGymEnvConfig` (or `FaultyMetaWorldEnvConfig`) wraps each simulator of the
env: at step `fault_step` of a faulty episode it raises (`fault_kind=raise`, as MuJoCo going unstable does) or
returns a NaN reward (`fault_kind=nan`). Which episodes fail, decided by (task id, episode index) only:
- `faults`: a list of `<task id>:<episode index>:<once|always>` (of every group);
- `fault_rate`: besides those, each episode whose hash falls under it (about that share of all), "once" or "always"
  by another bit of its hash.
An "always" episode fails every time it runs (it becomes an error episode); a "once" episode fails the first time
only, across processes: its first failure leaves a marker file in `fault_dir`, so the retry in a fresh worker runs it
undisturbed. With FAULTY_ENV_OFF=1 in the environment no episode fails (the fault fixed: a rerun of the same
configuration then runs its error episodes through); with FAULTY_ENV_ALL=1 every episode does (an unhealthy node).
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.envs.gym import GymEnvConfig
from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig

ONCE, ALWAYS = "once", "always"


@dataclass
class FaultSettings:
    faults: list[str] = field(default_factory=list)
    fault_rate: float = 0.0
    fault_step: int = 3
    fault_kind: str = "raise"
    fault_dir: str = ""


def fault_of(settings: FaultSettings, task: tuple[str, int], episode: int) -> str | None:
    """How episode `episode` of task `task` (group, id) fails: "once", "always", or None (it does not)."""
    for entry in settings.faults:
        t, k, mode = str(entry).split(":")
        if (int(t), int(k)) == (task[1], episode):
            return mode
    digest = zlib.crc32(f"{task[0]}/{task[1]}/{episode}".encode())
    if digest % 100_000 < settings.fault_rate * 100_000:
        return ALWAYS if (digest >> 20) % 2 else ONCE
    return None


def planned_faults(
    settings: FaultSettings, tasks: list[tuple[str, int]], n_episodes: int
) -> dict[tuple[str, int, int], str]:
    """Every faulty episode (group, task id, index) of a run over `tasks` x `n_episodes`, and how it fails."""
    out = {}
    for task in tasks:
        for k in range(n_episodes):
            mode = fault_of(settings, task, k)
            if mode is not None:
                out[(*task, k)] = mode
    return out


class FaultyTaskEnv:
    """A simulator that fails at step `fault_step` of its faulty episodes, and is `inner` otherwise."""

    def __init__(self, inner: Any, task: TaskSpec, settings: FaultSettings) -> None:
        self.inner, self.task, self.settings = inner, task, settings
        self.mode: str | None = None
        self.episode = self.steps = 0

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        self.episode = int((options or {}).get("episode_index", 0))
        self.mode, self.steps = fault_of(self.settings, self.task.key, self.episode), 0
        if os.environ.get("FAULTY_ENV_OFF") == "1" or os.environ.get("FAULTY_ENV_ALL") == "1":
            self.mode = ALWAYS if os.environ.get("FAULTY_ENV_ALL") == "1" else None
        return self.inner.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.steps += 1
        obs, reward, terminated, truncated, info = self.inner.step(action)
        if self.steps == self.settings.fault_step and self.mode is not None and self._fails_now():
            if self.settings.fault_kind == "nan":
                return obs, float("nan"), terminated, truncated, info
            raise FloatingPointError(f"faulty env: simulation unstable in episode {self.episode} (injected)")
        return obs, reward, terminated, truncated, info

    def _fails_now(self) -> bool:
        if self.mode == ALWAYS:
            return True
        marker = Path(self.settings.fault_dir) / f"{self.task.task_group}_{self.task.task_id}_{self.episode}"
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def render(self) -> Any:
        return self.inner.render()

    def close(self) -> None:
        self.inner.close()


@dataclass
class _Faulty(FaultSettings):
    """An env config whose simulators fail as its fault settings say (first in the bases, before the env's)."""

    def __post_init__(self) -> None:
        super().__post_init__()  # type: ignore[misc]
        once = self.fault_rate > 0 or any(str(f).endswith(ONCE) for f in self.faults)
        if once and not self.fault_dir:
            raise ValueError("env.fault_dir is required for episodes that fail once")

    def build(self, task: TaskSpec, render: bool) -> Any:
        return FaultyTaskEnv(super().build(task, render), task, self)  # type: ignore[misc]


@dataclass
class FaultyGymEnvConfig(_Faulty, GymEnvConfig):
    pass


@dataclass
class FaultyMetaWorldEnvConfig(_Faulty, MetaWorldEnvConfig):
    def display_name(self) -> str:
        return "MetaWorld"
