"""Error episodes (docs/faults.md): an episode whose simulator raises, or returns a non-finite reward, runs once more
in a fresh worker; an episode that fails once then equals an undisturbed run's, one that fails again is recorded as
an error episode, counted apart, and the run goes on and exits 3. A rerun runs the error episodes again."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.rollout.health import Health
from tests.conftest import read_episodes, read_json, run_eval
from tests.helpers.counting_env import CountingEnvConfig, events
from tests.rollout.test_vector import run

FAULT_LINE = "FloatingPointError: counting env: unstable simulation in episode 3"


def without_wall_time(records: list[EpisodeRecord]) -> list[EpisodeRecord]:
    return sorted((dataclasses.replace(r, wall_s=0.0) for r in records), key=lambda r: r.unit)


def undisturbed(tmp_path: Path, n_episodes: int, use_async: bool) -> list[EpisodeRecord]:
    clean = tmp_path / "clean"
    clean.mkdir()
    return without_wall_time(run(CountingEnvConfig(log_dir=str(clean), n_tasks=2), n_episodes, 2, use_async))


@pytest.mark.parametrize("use_async", [True, False])
def test_an_episode_that_fails_once_runs_again_in_a_fresh_simulator_and_equals_an_undisturbed_run(
    tmp_path: Path, use_async: bool, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=2, fault="raise", fault_episode=3)
    records = run(cfg, n_episodes=5, batch=2, use_async=use_async)
    assert without_wall_time(records) == undisturbed(tmp_path, 5, use_async)
    warnings = [r.getMessage() for r in caplog.records if "running it again" in r.getMessage()]
    assert len(warnings) == 1 and "at step 1 of episode 3 of task count/0 count-0" in warnings[0], warnings
    log = events(tmp_path)
    assert sum(e["event"] == "fault" for e in log) == 1
    task0 = [e for e in log if e["event"] == "created" and e["task"] == 0]
    clean = [e for e in events(tmp_path / "clean") if e["event"] == "created" and e["task"] == 0]
    assert len(task0) == len(clean) + 1, "the failed sub-env built a fresh simulator of task 0"
    if use_async:
        assert len({e["pid"] for e in task0}) == len(task0), "in a fresh worker process"


@pytest.mark.parametrize("use_async", [True, False])
def test_an_episode_that_fails_twice_is_an_error_episode_and_the_others_equal_an_undisturbed_run(
    tmp_path: Path, use_async: bool
) -> None:
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=2, fault="raise", fault_episode=3, fault_times=10)
    records = without_wall_time(run(cfg, n_episodes=5, batch=2, use_async=use_async))
    assert sum(e["event"] == "fault" for e in events(tmp_path)) == 2, "one retry, no more"
    errored = [r for r in records if r.errored]
    assert [(r.unit, r.error, r.error_step, r.success) for r in errored] == [(("count", 0, 3), FAULT_LINE, 1, False)]
    clean = undisturbed(tmp_path, 5, use_async)
    assert [r for r in records if not r.errored] == [r for r in clean if r.unit != ("count", 0, 3)]


def test_an_episode_whose_reset_always_raises_is_an_error_episode_at_step_0(tmp_path: Path) -> None:
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=1, fail_on_episode=1)
    records = run(cfg, n_episodes=3, batch=2, use_async=True)
    assert [(r.episode_index, r.error, r.error_step) for r in records] == [
        (0, None, None),
        (1, "RuntimeError: counting env: episode 1 fails on purpose", 0),
        (2, None, None),
    ]


def test_a_task_whose_first_episodes_all_fail_is_stopped_in_one_line_and_the_others_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # In this process a batch holds one task: task 0's six episodes first, then task 1's, whose resets all raise.
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=3, broken_task=1)
    health, records = Health(), list[EpisodeRecord]()

    def on_record(record: EpisodeRecord) -> None:
        records.append(record)
        health.recorded(record)  # as the run context does

    run(cfg, n_episodes=6, batch=2, use_async=False, on_record=on_record)
    by_task = {t: sorted((r.episode_index, r.errored) for r in records if r.task_id == t) for t in range(3)}
    assert by_task[0] == by_task[2] == [(k, False) for k in range(6)], "the other tasks ran every episode"
    assert by_task[1] == [(0, True), (1, True), (2, True)], "task 1 stopped after its first three"
    (line,) = [r.getMessage() for r in caplog.records if "all failed" in r.getMessage()]
    assert line.startswith("the first 3 episodes of task count/1 count-1 all failed in the simulator (the last: ")
    assert "likely a broken task" in line and "the same command runs them" in line


def test_a_run_whose_first_episodes_all_fail_stops_in_one_line(tmp_path: Path) -> None:
    # FAULTY_ENV_ALL=1: every episode fails (an unhealthy node).
    args = (*FAULTY[:3], *FAULTY[4:], "eval.batch_size=1", "eval.n_episodes=6")
    proc = run_eval(*args, out_dir=tmp_path, env={"FAULTY_ENV_ALL": "1"}, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: the first 3 episodes of this run all failed in the simulator (the last: episode 2, at step 3: "
        "FloatingPointError: faulty env: simulation unstable in episode 2 (injected)): likely an unhealthy node"
    ), proc.stderr
    assert [(r["episode_index"], r["error_step"]) for r in read_episodes(tmp_path)] == [(0, 3), (1, 3), (2, 3)]


def test_simulator_tracebacks_go_to_the_job_log_and_the_console_shows_one_line_each(tmp_path: Path) -> None:
    # Every reset raises (a missing asset): each episode fails twice, the run stops after its first three.
    args = ("env=gym", "env.package=tests.helpers.broken_env", "env.gym_id=MissingAsset-v0", "policy=random")
    proc = run_eval(*args, "eval.n_episodes=4", "eval.batch_size=2", out_dir=tmp_path, check=False)
    console = proc.stdout + proc.stderr
    assert proc.returncode == 2, console
    assert "Traceback" not in console and "raise FileNotFoundError" not in console, console
    assert len(re.findall(r"WARNING\] - the MissingAsset-v0 simulator failed", console)) == 6, console
    assert re.search(r"MissingAsset-v0: 3/4 episodes, - success, 3 error episode\(s\)", console), console
    assert [line for line in proc.stderr.splitlines() if line.strip()][-1].startswith(
        "error: the first 3 episodes of this run all failed in the simulator"
    ), proc.stderr
    log = (tmp_path / "eval.log").read_text()
    assert log.count("Traceback (most recent call last)") == 3 and "missing asset: /nowhere/scene.xml" in log


# CartPole with random actions; task 0's episode 1 fails at every attempt, episode 2 at its first only.
FAULTY = (
    "env=gym",
    "env.gym_id=CartPole-v1",
    "env._target_=devkit.faulty_env.FaultyGymEnvConfig",
    '+env.faults=["0:1:always","0:2:once"]',
    "policy=random",
    "eval.n_episodes=4",
    "eval.batch_size=2",
)


def outcomes(run_dir: Path) -> dict[int, tuple]:
    return {r["episode_index"]: (r["seed"], r["success"], r["sum_reward"], r["steps"]) for r in read_episodes(run_dir)}


def test_a_run_with_an_error_episode_counts_it_apart_exits_3_and_its_rerun_runs_it_again(tmp_path: Path) -> None:
    out, markers = tmp_path / "run", tmp_path / "markers"
    markers.mkdir()
    args = (*FAULTY, f"+env.fault_dir={markers}")
    proc = run_eval(*args, out_dir=out, check=False)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("lerobot_hydra: 1 error episode(s): the simulator failed")
    assert "Traceback" in (out / "eval.log").read_text(), "the traceback is in the run's log"
    assert re.search(r"4/4 episodes, \d+% success, 1 error episode\(s\)", proc.stdout + proc.stderr), proc.stdout
    info = read_json(out / "eval_info.json")
    task = info["per_task"][0]
    assert (task["n_episodes"], task["n_errors"], len(task["metrics"]["successes"])) == (3, 1, 3)
    assert (info["overall"]["n_episodes"], info["overall"]["n_errors"]) == (3, 1)
    assert [(e["episode_index"], e["error_step"]) for e in info["episodes"] if e["error"]] == [(1, 3)]
    table = proc.stdout[proc.stdout.index("Evaluation results") :]
    assert table.splitlines()[1].split() == ["task", "episodes", "success", "95%", "CI", "errors"], table
    assert "1 error episode(s)" in table

    clean = tmp_path / "clean"
    run_eval(*args, out_dir=clean, env={"FAULTY_ENV_OFF": "1"})
    assert {k: v for k, v in outcomes(out).items() if k != 1} == {k: v for k, v in outcomes(clean).items() if k != 1}

    # The fault fixed, the same command runs the error episode again: now evaluated, the run exits 0.
    rerun = run_eval(*args, out_dir=out, env={"FAULTY_ENV_OFF": "1"}, check=False)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    info = read_json(out / "eval_info.json")
    assert (info["overall"]["n_episodes"], info["overall"]["n_errors"]) == (4, 0)
    assert outcomes(out) == outcomes(clean)
    assert sorted(e["episode_index"] for e in info["episodes"]) == [0, 1, 2, 3]


def test_a_nan_reward_twice_is_an_error_episode(tmp_path: Path) -> None:
    # Seed 1000 + 1 is odd: NanReward-v0's episode 1 returns a NaN reward at its second step, every time.
    args = ("env=gym", "env.package=tests.helpers.broken_env", "env.gym_id=NanReward-v0", "policy=random")
    proc = run_eval(*args, "eval.batch_size=1", "seed=1000", "eval.n_episodes=3", out_dir=tmp_path, check=False)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    errors = [(r["episode_index"], r["error"], r["error_step"]) for r in read_episodes(tmp_path) if r["error"]]
    assert errors == [(1, "the env returned a reward of nan", 2)]
