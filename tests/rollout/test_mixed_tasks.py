"""Mixed-task batches and idle rows: at a task's end, sub-envs its last episodes leave idle start the next task's
episodes at once (in their own workers), every episode's record stays exactly what it is when each task runs
alone, and a row with nothing to run is never computed by the policy."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.policies.random import RandomPolicy
from lerobot_hydra.rollout.lanes import LaneSettings, evaluate
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.runner import TaskWork
from tests.helpers.counting_env import CountingEnv, CountingEnvConfig, events
from tests.helpers.drift_env import DriftEnvConfig, episode_length

FIELDS = ("task_id", "episode_index", "seed", "success", "sum_reward", "max_reward", "steps", "init_state_id")


def run(
    env: EnvConfig, policy: Any, episodes: int, batch: int, use_async: bool, tasks: Sequence[TaskSpec] | None = None
) -> list[EpisodeRecord]:
    records: list[EpisodeRecord] = []
    pre, post = env.build_processors()
    work = [TaskWork(t, list(range(episodes))) for t in (env.tasks() if tasks is None else tasks)]
    evaluate(LaneSettings(env, pre, post, 1000, batch, use_async), work, lambda: policy, records.append, Progress(60.0))
    return records


def outcomes(records: list[EpisodeRecord]) -> list[tuple]:
    return sorted(tuple(dataclasses.asdict(r)[f] for f in FIELDS) for r in records)


def alone(env: EnvConfig, make_policy: Any, episodes: int, batch: int) -> list[tuple]:
    """Each task run by itself: no batch ever holds two tasks."""
    return outcomes([r for t in env.tasks() for r in run(env, make_policy(), episodes, batch, True, [t])])


@dataclass
class StartsNextEnvConfig(CountingEnvConfig):
    """Task 0's last episode (episode 2) goes on until an episode of task 1 has started (or for 10 s)."""

    def build(self, task: TaskSpec, render: bool) -> Any:
        return StartsNextEnv(Path(self.log_dir), task)


class StartsNextEnv(CountingEnv):
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        out = super().reset(seed, options)
        if self.task.task_id == 1:
            (self.log_dir / "task_1_started").touch()
        self.deadline = time.monotonic() + 10
        return out

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        obs, reward, done, truncated, info = super().step(action)
        if self.task.task_id == 0 and self.length == 4 and done:
            started = (self.log_dir / "task_1_started").exists()
            if not started and time.monotonic() < self.deadline:
                time.sleep(0.005)
                return obs, reward, False, truncated, {"is_success": False}
            self._log("task 0 ended", task_1_started=started)
        return obs, reward, done, truncated, info


def test_the_next_tasks_episodes_start_before_the_last_one_of_the_previous_task_ends(tmp_path: Path) -> None:
    # Batch 2: task 0's episodes 0 and 1 (2 and 3 steps) start together; episode 2 takes over the sub-env of
    # episode 0, so the other sub-env is free from the end of episode 1 on: it starts task 1's episode 0 (without
    # mixing, only once episode 2 has ended: after 10 s).
    cfg = StartsNextEnvConfig(log_dir=str(tmp_path), n_tasks=2, episode_length=10**6)
    records = run(cfg, RandomPolicy(cfg.spaces(cfg.tasks()[0])[1]), 3, 2, True)
    log = events(tmp_path)
    assert [e["task_1_started"] for e in log if e["event"] == "task 0 ended"] == [True]
    # One simulator per process at any time: each worker closes a task's simulator before building the next.
    for pid in {e["pid"] for e in log}:
        sims = [e["event"] for e in log if e["pid"] == pid and e["event"] in ("created", "closed")]
        assert sims == ["created", "closed"] * (len(sims) // 2), sims
    assert {r.task_id for r in records} == {0, 1} and len(records) == 6


def test_mixed_batches_give_the_records_of_each_task_run_alone() -> None:
    """The random policy (noise seeded per episode) on an env whose tasks differ in start, length and rewards:
    every batch size, mixed, in-process (never mixed) and each task alone give the same records."""
    env = DriftEnvConfig(n_tasks=3, episode_length=30)
    action_space = env.spaces(env.tasks()[0])[1]
    expected = alone(env, lambda: RandomPolicy(action_space), 4, 1)
    assert [o[-2] for o in expected] == [episode_length(k, i) for i in range(3) for k in range(4)]
    assert len({o[4] for o in expected}) == len(expected)  # every episode acted differently
    for batch, use_async in [(2, True), (3, True), (4, True), (3, False)]:
        assert outcomes(run(env, RandomPolicy(action_space), 4, batch, use_async)) == expected, (batch, use_async)


class CountingRows(RandomPolicy):
    """The random policy, counting the rows it computes: those with an episode (the others are idle)."""

    computed = 0

    def select_action(self, batch: dict[str, Any]) -> np.ndarray:
        CountingRows.computed += sum(space is not None for space in self._spaces)
        return super().select_action(batch)


@pytest.mark.parametrize("use_async", [True, False])
def test_rows_without_an_episode_are_not_computed(use_async: bool) -> None:
    env = DriftEnvConfig(n_tasks=2, episode_length=30)
    CountingRows.computed = 0
    records = run(env, CountingRows(env.spaces(env.tasks()[0])[1]), 5, 3, use_async)
    # One row computed per step of an episode: none for a row whose episode has ended (its batch goes on).
    assert CountingRows.computed == sum(r.steps for r in records)
