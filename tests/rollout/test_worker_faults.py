"""Faults of worker processes and simulators (docs/faults.md): a lost worker (killed, or wedged past the watchdog) is
replaced and the episodes in flight run again, so the records equal an undisturbed run's; a worker lost too often on
one episode, or with eval.on_error=stop a simulator that raises, ends the run in one line and keeps what finished
(the default, error episodes: tests/rollout/test_error_episodes.py)."""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

import pytest

from devkit.worker_kills import kill_a_worker, outcomes, start_eval, wait_for_records
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.rollout.recovery import SimulatorFailed
from lerobot_hydra.vector.faults import WorkerFaults
from tests.conftest import run_eval
from tests.helpers.counting_env import CountingEnvConfig, events
from tests.rollout.test_vector import run

STOP = WorkerFaults(on_error="stop")


def without_wall_time(records: list[EpisodeRecord]) -> list[EpisodeRecord]:
    """The records without their wall time (the one field a restart changes)."""
    return sorted((dataclasses.replace(r, wall_s=0.0) for r in records), key=lambda r: r.unit)


def undisturbed(tmp_path: Path, n_episodes: int) -> list[EpisodeRecord]:
    clean = tmp_path / "clean"
    clean.mkdir()
    return without_wall_time(run(CountingEnvConfig(log_dir=str(clean), n_tasks=2), n_episodes, batch=2, use_async=True))


@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_a_lost_worker_is_replaced_and_the_records_equal_an_undisturbed_run(
    tmp_path: Path, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Task 0's episode 3 loses its worker at its first step: SIGKILLed, or wedged until the watchdog kills it.
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=2, fault=fault, fault_episode=3, step_sleep_s=0.001)
    watchdog = WorkerFaults(step_timeout_s=5.0 if fault == "hang" else 300.0)
    records = run(cfg, n_episodes=6, batch=2, use_async=True, faults=watchdog)
    assert without_wall_time(records) == undisturbed(tmp_path, 6)
    log = events(tmp_path)
    assert [e["kind"] for e in log if e["event"] == "fault"] == [fault]
    why = "was killed by SIGKILL" if fault == "kill" else "did not answer within eval.step_timeout_s=5 s"
    warnings = [r.getMessage() for r in caplog.records if "replaced it" in r.getMessage()]
    assert len(warnings) == 1 and why in warnings[0] and "running episode 3 of task count/0 count-0" in warnings[0]
    worker_pids = {e["pid"] for e in log if e["event"] == "created"}
    assert len(worker_pids) == 3, "the lost worker was replaced by one new process"


def test_a_worker_lost_too_often_on_one_episode_ends_the_run_in_one_line(tmp_path: Path) -> None:
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=1, fault="kill", fault_episode=2, fault_times=10)
    records: list[EpisodeRecord] = []
    with pytest.raises(UserError) as err:
        run(cfg, n_episodes=4, batch=2, use_async=True, on_record=records.append, faults=WorkerFaults(worker_retries=2))
    line = str(err.value)
    assert "\n" not in line
    assert re.fullmatch(
        r"the Counting worker of sub-env \d was killed by SIGKILL \(likely out of memory: the kernel's OOM killer; "
        r"see `dmesg`\), 3 times running episode 2 of task count/0 count-0; the episodes recorded so far are kept "
        r"\(rerun the same command to resume; eval.worker_retries=2 allows more replacements\)",
        line,
    ), line
    assert sum(e["event"] == "fault" for e in events(tmp_path)) == 3
    # Episode 0 ended before episode 2's first step; episode 1, in flight beside it, restarted with it each time.
    assert [r.episode_index for r in records] == [0], "the episode that finished before is kept"


@pytest.mark.parametrize("use_async", [True, False])
def test_a_simulator_exception_is_one_line_naming_env_task_episode_and_step(tmp_path: Path, use_async: bool) -> None:
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=1, fault="raise", fault_episode=2)
    records: list[EpisodeRecord] = []
    with pytest.raises(SimulatorFailed) as err:
        run(cfg, n_episodes=4, batch=2, use_async=use_async, on_record=records.append, faults=STOP)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(
        "the Counting simulator raised at step 1 of episode 2 of task count/0 count-0: "
        "FloatingPointError: counting env: unstable simulation in episode 2; a simulator fault, not a policy failure"
    ), line
    assert "HYDRA_FULL_ERROR=1 shows the traceback" in line
    assert "_inject_fault" in err.value.traceback, "the simulator's traceback is kept for HYDRA_FULL_ERROR=1"
    assert 2 not in {r.episode_index for r in records}, "never recorded as a failed episode"
    assert 0 in {r.episode_index for r in records}, "the episode that ended before is kept"


@pytest.mark.parametrize("use_async", [True, False])
def test_a_simulator_exception_in_reset_names_the_reset(tmp_path: Path, use_async: bool) -> None:
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=1, fail_on_episode=1)
    match = r"^the Counting simulator raised in reset of episode 1 of task count/0 "
    with pytest.raises(SimulatorFailed, match=match):
        run(cfg, n_episodes=3, batch=2, use_async=use_async, faults=STOP)


# Random actions on two MetaWorld tasks, two workers: 8 episodes of 100 steps (~0.2 s each).
METAWORLD = [
    "env.task=[reach-v3,push-v3]",
    "policy=random",
    "env.obs_type=state",
    "eval.n_episodes=4",
    "env.episode_length=100",
    "eval.batch_size=2",
]


def test_a_metaworld_worker_killed_mid_run_is_replaced_and_the_records_equal_an_undisturbed_run(
    tmp_path: Path,
) -> None:
    disturbed = tmp_path / "killed"
    proc = start_eval(disturbed, METAWORLD)
    wait_for_records(proc, disturbed, 1)
    killed = kill_a_worker(proc.pid, random.Random(0))
    stdout, stderr = proc.communicate(timeout=600)
    out = stdout + stderr
    assert killed is not None and proc.returncode == 0, out
    assert re.search(r"the MetaWorld worker of sub-env \d was killed by SIGKILL .* replaced it", out), out
    assert "Traceback" not in out
    run_eval(*METAWORLD, out_dir=tmp_path / "clean")
    assert outcomes(disturbed) == outcomes(tmp_path / "clean")
    assert len(outcomes(disturbed)) == 8
