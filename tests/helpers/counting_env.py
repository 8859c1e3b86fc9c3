"""A tiny deterministic benchmark for testing the vector-env machinery itself: no simulator, but it logs
every creation (with the creating process) and every simulated step to files, so tests can count them."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_hydra.envs.base import EnvConfig, TaskSpec


@dataclass
class CountingEnvConfig(EnvConfig):
    log_dir: str = ""
    n_tasks: int = 3
    episode_length: int | None = 20
    fail_on_episode: int | None = None  # task 0's reset of this episode raises
    broken_task: int | None = None  # every reset of this task raises
    step_sleep_s: float = 0.0  # wall time of each step
    camera: str = ""  # set: building the env fails as robosuite does for an unknown camera
    # Faults of task 0's episode `fault_episode` at its first step: "kill" (the process SIGKILLs itself, as the OOM
    # killer would), "hang" (a wedged simulator) or "raise" (the simulator raises); `fault_times` times in all, counted
    # in log_dir across the processes.
    fault: str = ""
    fault_episode: int = 0
    fault_times: int = 1

    def tasks(self) -> list[TaskSpec]:
        return [
            TaskSpec("count", i, f"count-{i}", f"count task {i}", self.episode_length or 20)
            for i in range(self.n_tasks)
        ]

    def spaces(self, task: TaskSpec) -> tuple[Any, Any]:
        from gymnasium import spaces

        return spaces.Dict({"agent_pos": spaces.Box(-1e6, 1e6, (2,), np.float64)}), spaces.Box(-1, 1, (1,), np.float32)

    def build(self, task: TaskSpec, render: bool) -> Any:
        if self.camera:
            raise ValueError(f"Current sensor for observable {self.camera}_image is invalid.")
        env = CountingEnv(Path(self.log_dir), task, self.fail_on_episode, self.step_sleep_s)
        env.broken = task.task_id == self.broken_task
        if self.fault and task.task_id == 0:
            env.fault = (self.fault, self.fault_episode, self.fault_times)
        return env


class CountingEnv:
    """Episode k succeeds and terminates after k + 2 steps (so episodes end at different steps)."""

    def __init__(self, log_dir: Path, task: TaskSpec, fail_on_episode: int | None = None, sleep_s: float = 0.0) -> None:
        self.log_dir, self.task = log_dir, task
        self.fail_on_episode = fail_on_episode if task.task_id == 0 else None
        self.sleep_s = sleep_s
        self.steps = self.episode_steps = self.length = self.episode = 0
        self.fault: tuple[str, int, int] | None = None
        self.broken = False
        self._log("created")

    def _log(self, event: str, **extra: Any) -> None:
        with open(self.log_dir / "events.jsonl", "a") as f:
            f.write(json.dumps({"event": event, "pid": os.getpid(), "task": self.task.task_id, **extra}) + "\n")

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        k = (options or {}).get("episode_index", 0)
        if k == self.fail_on_episode:
            raise RuntimeError(f"counting env: episode {k} fails on purpose")
        if self.broken:
            raise RuntimeError(f"counting env: task {self.task.task_id} is broken on purpose")
        self.length, self.episode_steps, self.episode = k + 2, 0, k
        return {"agent_pos": np.array([k, 0.0])}, {"init_state_id": k % 3}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        time.sleep(self.sleep_s)
        if self.fault is not None and self.episode_steps == 0:
            self._inject_fault(*self.fault)
        self.steps += 1
        self.episode_steps += 1
        done = self.episode_steps >= self.length
        return {"agent_pos": np.array([self.length, self.episode_steps], float)}, 1.0, done, False, {"is_success": done}

    def _inject_fault(self, kind: str, episode: int, times: int) -> None:
        if self.episode != episode or sum(e["event"] == "fault" for e in events(self.log_dir)) >= times:
            return
        self._log("fault", kind=kind, episode=episode)
        if kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "hang":
            time.sleep(3600)
        if kind == "raise":
            raise FloatingPointError(f"counting env: unstable simulation in episode {episode}")

    def render(self) -> np.ndarray:
        return np.zeros((8, 8, 3), np.uint8)

    def close(self) -> None:
        self._log("closed", steps=self.steps)


def events(log_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (log_dir / "events.jsonl").read_text().splitlines()]
