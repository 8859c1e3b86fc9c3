"""The vector-env machinery: lazy simulators in workers, workers reused across tasks, no surplus or
post-episode simulation, records handed over as episodes end, the next task's simulators built by sub-envs idle at a
task's end, and episode outcomes independent of batching and lanes."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.policies.random import RandomPolicy
from lerobot_hydra.processors.observation import LeRobotLayout, MapObservationKeys, ToNumpyAction
from lerobot_hydra.processors.pipeline import Pipeline
from lerobot_hydra.rollout.lanes import LaneSettings, evaluate
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.runner import TaskWork
from lerobot_hydra.run.pools import KeptPools
from lerobot_hydra.vector.faults import WorkerFaults
from tests.helpers.counting_env import CountingEnv, CountingEnvConfig, events

DEFAULT_FAULTS = WorkerFaults()


def run(
    cfg: CountingEnvConfig,
    n_episodes: int,
    batch: int,
    use_async: bool,
    lanes: int = 1,
    on_record: Callable[[EpisodeRecord], None] | None = None,
    policy: Callable[[], RandomPolicy] | None = None,
    warm: KeptPools | None = None,
    mixes_tasks: bool = True,
    faults: WorkerFaults = DEFAULT_FAULTS,
) -> list[EpisodeRecord]:
    records: list[EpisodeRecord] = []
    _, action_space = cfg.spaces(cfg.tasks()[0])
    work = [TaskWork(t, list(range(n_episodes))) for t in cfg.tasks()]
    evaluate(
        LaneSettings(
            cfg,
            Pipeline([MapObservationKeys({}), LeRobotLayout()]),
            Pipeline([ToNumpyAction()]),
            10,
            batch,
            use_async,
            lanes,
            mixes_tasks=mixes_tasks,  # RandomPolicy resets rows one at a time: declared by its config
            faults=faults,
        ),
        work,
        policy or (lambda: RandomPolicy(action_space)),
        on_record=on_record or records.append,
        progress=Progress(60.0),
        make_pools=warm,
    )
    return sorted(records, key=lambda r: r.unit)


@pytest.mark.parametrize("lanes", [1, 2])
def test_warm_pools_run_the_next_evaluation_without_new_workers_or_simulators(tmp_path: Path, lanes: int) -> None:
    """A run context's kept pools (rounds, claimed blocks, the Python API's Evaluator): a second run of the same
    work reuses every worker and, each sub-env running the task its simulator was built for, builds no simulator;
    closing ends them all."""
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=2)
    warm = KeptPools()
    try:
        first = run(cfg, 2, 2, True, lanes, warm=warm)
        created = [e for e in events(tmp_path) if e["event"] == "created"]
        second = run(cfg, 2, 2, True, lanes, warm=warm)
        assert [e for e in events(tmp_path) if e["event"] == "created"] == created
        assert not [e for e in events(tmp_path) if e["event"] == "closed"]
    finally:
        warm.close()
    assert [dataclasses.replace(r, wall_s=0) for r in first] == [dataclasses.replace(r, wall_s=0) for r in second]
    assert len([e for e in events(tmp_path) if e["event"] == "closed"]) == len(created)


@pytest.mark.parametrize("use_async", [True, False])
def test_workers_are_reused_across_tasks_and_simulators_live_only_in_them(tmp_path: Path, use_async: bool) -> None:
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=3)
    records = run(cfg, n_episodes=3, batch=2, use_async=use_async)
    log = events(tmp_path)
    created = [e for e in log if e["event"] == "created"]
    pids = {e["pid"] for e in created}
    if use_async:
        assert os.getpid() not in pids  # no simulator is ever created in the parent
        assert len(pids) == 2  # one set of workers (the batch size) serves all three tasks
    else:
        assert pids == {os.getpid()}
    # Each task's simulator is created at most once per slot (a slot that finishes early may start the next task's
    # episodes, so the other may never build the last task: mixed-task batches), and every one is closed.
    if use_async:
        per_worker = [(e["pid"], e["task"]) for e in created]
        assert {task for _, task in per_worker} == {0, 1, 2} and len(per_worker) == len(set(per_worker))
    else:  # in-process slots never mix tasks
        assert sorted(e["task"] for e in created) == [0, 0, 1, 1, 2, 2]
    assert len([e for e in log if e["event"] == "closed"]) == len(created)
    assert len(records) == 9


def test_no_surplus_episodes_and_no_steps_after_an_episode_ends(tmp_path: Path) -> None:
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=2)
    records = run(cfg, n_episodes=3, batch=2, use_async=True)
    simulated = sum(e["steps"] for e in events(tmp_path) if e["event"] == "closed")
    # Episode k runs exactly k + 2 steps; the idle slot of the last batch never steps.
    assert simulated == 2 * sum(k + 2 for k in range(3))
    assert [r.steps for r in records if r.task_id == 0] == [2, 3, 4]
    assert all(r.success and r.sum_reward == r.steps for r in records)
    assert [r.init_state_id for r in records if r.task_id == 0] == [0, 1, 2]
    assert [r.seed for r in records if r.task_id == 1] == [10, 11, 12]


def test_outcomes_do_not_depend_on_batch_size_or_parallel_tasks(tmp_path: Path) -> None:
    def outcomes(records: list[EpisodeRecord]) -> list[tuple]:
        return [(r.unit, r.seed, r.steps, r.success, r.sum_reward, r.init_state_id) for r in records]

    results = []
    for i, (batch, use_async, lanes) in enumerate([(1, False, 1), (3, True, 1), (2, True, 3), (5, False, 2)]):
        (tmp_path / str(i)).mkdir()
        cfg = CountingEnvConfig(log_dir=str(tmp_path / str(i)), n_tasks=3)
        results.append(outcomes(run(cfg, n_episodes=5, batch=batch, use_async=use_async, lanes=lanes)))
    assert all(r == results[0] for r in results)
    assert len(results[0]) == 15


def test_each_record_is_handed_over_the_moment_its_episode_ends(tmp_path: Path) -> None:
    class Interrupted(Exception):
        pass

    def interrupt(record: EpisodeRecord) -> None:
        raise Interrupted(record.episode_index)

    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=1)
    with pytest.raises(Interrupted) as caught:
        run(cfg, n_episodes=3, batch=1, use_async=False, on_record=interrupt)
    assert caught.value.args == (0,)
    # Episode 0 takes 2 steps; had its record waited for the batch, episodes 1 and 2 would have run too.
    assert [e["steps"] for e in events(tmp_path) if e["event"] == "closed"] == [2]


@dataclass
class HandoverEnvConfig(CountingEnvConfig):
    """Task 0's last episode cannot end until task 1's simulator exists (or 10 s pass): it ends in time only
    if a sub-env left idle by task 0 builds task 1's simulator while that episode runs."""

    def build(self, task: TaskSpec, render: bool) -> Any:
        return HandoverEnv(Path(self.log_dir), task)


class HandoverEnv(CountingEnv):
    def __init__(self, log_dir: Path, task: TaskSpec) -> None:
        super().__init__(log_dir, task)
        (log_dir / f"task_{task.task_id}_built").touch()

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        out = super().step(action)
        if self.task.task_id == 0 and self.length == 4 and self.episode_steps == self.length:
            deadline = time.monotonic() + 10
            while not (self.log_dir / "task_1_built").exists() and time.monotonic() < deadline:
                time.sleep(0.005)
            self._log("task 0 ended", task_1_built=(self.log_dir / "task_1_built").exists())
        return out


def test_sub_envs_idle_at_a_tasks_end_build_the_next_tasks_simulator_meanwhile(tmp_path: Path) -> None:
    # Batch 2: episodes 0 and 1 (2 and 3 steps) start together; episode 2 (4 steps) takes over the sub-env of
    # episode 0, so the other sub-env is idle from the end of episode 1 on.
    # Planned as for a policy not known to reset rows one at a time: both sub-envs start on task 0.
    cfg = HandoverEnvConfig(log_dir=str(tmp_path), n_tasks=2)
    records = run(cfg, n_episodes=3, batch=2, use_async=True, mixes_tasks=False)
    log = events(tmp_path)
    assert [e["task_1_built"] for e in log if e["event"] == "task 0 ended"] == [True]
    # Still one simulator per sub-env per task, each closed before its sub-env builds the next one.
    for pid in {e["pid"] for e in log}:
        assert [(e["event"], e["task"]) for e in log if e["pid"] == pid and e["event"] != "task 0 ended"] == [
            ("created", 0),
            ("closed", 0),
            ("created", 1),
            ("closed", 1),
        ]
    assert [r.steps for r in records] == [2, 3, 4] * 2


def test_workers_build_their_first_simulators_while_the_policy_loads(tmp_path: Path) -> None:
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=2)
    built_meanwhile: list[int] = []

    def load_policy() -> RandomPolicy:
        # Stands in for a checkpoint that takes seconds to load: it waits (up to 10 s) for the simulators.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            log = events(tmp_path) if (tmp_path / "events.jsonl").exists() else []
            if len([e for e in log if e["event"] == "created"]) == 2:
                break
            time.sleep(0.01)
        built_meanwhile.append(sorted(e["task"] for e in log if e["event"] == "created"))
        return RandomPolicy(cfg.spaces(cfg.tasks()[0])[1])

    records = run(cfg, n_episodes=2, batch=2, use_async=True, policy=load_policy)
    # Batches mix tasks (the policy resets rows one at a time): each worker builds its own task's simulator.
    assert built_meanwhile == [[0, 1]], "both workers build a simulator while the policy loads"
    assert len(records) == 4
    created = [(e["pid"], e["task"]) for e in events(tmp_path) if e["event"] == "created"]
    assert len(created) == 2 and len({pid for pid, _ in created}) == 2, "each task's simulator is built once"


def test_a_policy_that_fails_to_load_leaves_no_workers_behind(tmp_path: Path) -> None:
    class Unloadable(Exception):
        pass

    def load_policy() -> RandomPolicy:
        raise Unloadable("checkpoint not found")

    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=2)
    with pytest.raises(Unloadable):
        run(cfg, n_episodes=2, batch=2, use_async=True, policy=load_policy)
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("lerobot_hydra-slot")]
