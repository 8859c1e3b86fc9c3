"""The episodes a lane runs: the unit of work (task, episode index, seed), its running state on a sub-env, the
record it becomes, and the frames its film gets."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.rollout.filming import FilmedEpisode
from lerobot_hydra.rollout.recording import Step, StepRecorder, observation_row
from lerobot_hydra.vector.task_envs import EnvPool

log = logging.getLogger("lerobot_hydra")


@dataclass(frozen=True)
class Unit:
    """Episode `index` of `task`, seeded with `seed`: all an episode's outcome depends on."""

    task: TaskSpec
    index: int
    seed: int

    def record(self, **outcome: Any) -> EpisodeRecord:
        """This episode's record with `outcome` (success, rewards, steps, ...: the fields past its identity)."""
        task = self.task
        return EpisodeRecord(
            task_group=task.task_group,
            task_id=task.task_id,
            task_name=task.name,
            task=task.description,
            episode_index=self.index,
            seed=self.seed,
            **outcome,
        )


@dataclass
class Episode:
    """The running episode of one sub-env."""

    unit: Unit
    init_state: int | None
    started: float
    video: FilmedEpisode | None
    sum_reward: float = 0.0
    max_reward: float = -np.inf
    success: bool = False
    steps: int = 0
    trace: list[Step] | None = None  # every step, when a recorder is in use (rollout/recording.py)

    @property
    def task(self) -> TaskSpec:
        return self.unit.task

    def add_step(self, reward: float, success: bool) -> None:
        """A step's reward (finite: the runner checked it) and success."""
        self.sum_reward += reward
        self.max_reward = max(self.max_reward, reward)
        self.steps += 1
        self.success |= success

    def trace_step(self, obs: Any, action: np.ndarray, row: int, reward: float, done: bool, success: bool) -> None:
        """Keeps step `self.steps` of a recorded episode: the observation its action was taken on, the action
        sent to the env, and what the env answered."""
        if self.trace is not None:
            step = {"observation": observation_row(obs, row), "action": np.array(action[row])}
            self.trace.append(step | {"reward": reward, "done": done, "success": success})

    def hand_over(self, record: EpisodeRecord, recorder: StepRecorder | None) -> None:
        """A recorded episode's steps go to `recorder` with its record."""
        if self.trace is not None and recorder is not None:
            recorder.hold(record.unit, self.trace)
            self.trace = None

    def record(self, timing: dict[str, Any] | None = None) -> EpisodeRecord:
        """Its record; `timing`: what its inferences cost (`RunsOnClock.row_timing`)."""
        return self.unit.record(
            **(timing or {}),
            success=self.success,
            sum_reward=self.sum_reward,
            max_reward=self.max_reward,
            steps=self.steps,
            wall_s=round(time.perf_counter() - self.started, 4),
            init_state_id=self.init_state,
            video_path=self.video.finish() if self.video is not None else None,
        )


def capture_frames(pool: EnvPool, running: list[Episode | None], only: set[int]) -> None:
    """Renders only the sub-envs of `only` whose running episode is filmed; one that yields no frame loses its
    video."""
    wanted = [i for i, e in enumerate(running) if e is not None and e.video is not None and i in only]
    if not wanted:
        return
    frames = pool.render_frames(wanted)
    for i in wanted:
        episode = running[i]
        assert episode is not None and episode.video is not None
        if frames[i] is None:
            episode.video.lost()
            episode.video = None
        else:
            episode.video.add(frames[i])


def as_actions(action: Any, n: int, dtype: Any, noop: list[int]) -> np.ndarray:
    """The policy's actions as the env's batch; the rows in `noop` get the env's no-op, all zeros
    (`eval.clock.hold=noop`, `EnvConfig.zero_action_holds`)."""
    if hasattr(action, "detach"):
        action = action.detach().to("cpu").numpy()
    action = np.asarray(action, dtype=dtype)
    if action.shape[:1] != (n,):
        raise ValueError(f"the policy returned actions of shape {action.shape}; expected a batch of {n}")
    if noop:
        action = action.copy()
        action[noop] = 0
    return action
