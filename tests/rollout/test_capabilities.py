"""Capabilities are declared, never discovered: the runner restarts single batch rows only for a policy whose class
declares `RowResettablePolicy` (policies/base.py), not for one that merely has a `reset_slots` method."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.policies.base import Policy, resets_rows
from lerobot_hydra.policies.random import RandomPolicy
from lerobot_hydra.processors.observation import LeRobotLayout, MapObservationKeys, ToNumpyAction
from lerobot_hydra.processors.pipeline import Pipeline
from lerobot_hydra.rollout.lanes import LaneSettings, evaluate
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.runner import TaskWork
from tests.helpers.counting_env import CountingEnvConfig


class CountedRandom(RandomPolicy):
    """RandomPolicy (which declares RowResettablePolicy), counting its batch steps."""

    steps = 0

    def select_action(self, batch: dict[str, Any]) -> Any:
        type(self).steps += 1
        return super().select_action(batch)


class UndeclaredRowResets(Policy):
    """The same actions and a working `reset_slots`, without declaring RowResettablePolicy."""

    steps = 0

    def __init__(self, inner: RandomPolicy) -> None:
        self.inner = inner

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        self.inner.reset(task, episode_seeds)

    def reset_slots(self, task: TaskSpec, seeds: dict[int, int]) -> None:
        self.inner.reset_slots(task, seeds)

    def select_action(self, batch: dict[str, Any]) -> Any:
        type(self).steps += 1
        return self.inner.select_action(batch)

    def fork(self) -> UndeclaredRowResets:
        return UndeclaredRowResets(self.inner.fork())


def batch_steps(tmp_path: Path, policy: Policy) -> int:
    """Batch steps of 3 counting episodes (episode k: k + 2 steps) on 2 sub-envs, in this process."""
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=1)
    records: list[Any] = []
    evaluate(
        LaneSettings(
            cfg, Pipeline([MapObservationKeys({}), LeRobotLayout()]), Pipeline([ToNumpyAction()]), 10, 2, False, 1
        ),
        [TaskWork(cfg.tasks()[0], [0, 1, 2])],
        lambda: policy,
        on_record=records.append,
        progress=Progress(60.0),
    )
    assert sorted(r.episode_index for r in records) == [0, 1, 2]
    return type(policy).steps  # type: ignore[attr-defined, no-any-return]


def test_single_rows_restart_only_for_a_policy_that_declares_it(tmp_path: Path) -> None:
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=1)
    _, action_space = cfg.spaces(cfg.tasks()[0])
    declared, undeclared = CountedRandom(action_space), UndeclaredRowResets(RandomPolicy(action_space))
    assert resets_rows(declared) and not resets_rows(undeclared)
    # Declared: episode 2 starts on sub-env 0 when episode 0 ends (step 2) and ends at step 6.
    assert batch_steps(tmp_path, declared) == 6
    # Lockstep: episodes 0 and 1 together (3 steps), then episode 2 alone (4 steps).
    assert batch_steps(tmp_path, undeclared) == 7
