"""Cluster events on the local SLURM cluster: a shard job with worker processes cancelled (SIGTERM to every process of
the job), killed (SIGKILL, as on node loss or OOM), requeued by SLURM (preemption) and preempted through submitit's
signal. The sweep reports each job by its SLURM state in one line without a traceback, exits non-zero, and a rerun
(or the requeue) resumes so that the merge equals the unsharded run, every episode recorded once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, outcome, read_json, run_eval
from tests.sweeps.test_sharding import slurm  # noqa: F401  the session fixture that starts the local cluster

# Random actions never succeed early: each episode runs its full length (~3 s), so a signal lands mid-shard.
WORKLOAD = (
    "env.task=[push-v3]",
    "policy=random",
    "env.obs_type=state",
    "eval.n_episodes=12",
    "env.episode_length=400",
    "eval.batch_size=2",  # worker processes, which SLURM signals too
)
SWEEP = (*WORKLOAD, "eval.shard_id=0,1", "hydra/launcher=submitit_slurm")
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    out = tmp_path_factory.mktemp("unsharded")
    run_eval(*WORKLOAD, out_dir=out)
    return [outcome(r) for r in read_json(out / "eval_info.json")["episodes"]]


def wait_for_an_idle_cluster() -> None:
    """Jobs of an earlier test still ending (SLURM's KillWait) hold CPUs, so one shard job could start long after the
    other, which may then finish before the fault is injected: each sweep starts on an empty queue."""
    deadline = time.monotonic() + TIMEOUT_S
    while subprocess.run(["squeue", "-h"], capture_output=True, text=True, check=True).stdout.strip():
        assert time.monotonic() < deadline, "the local SLURM cluster still runs an earlier test's jobs"
        time.sleep(0.5)


def start_sweep(sweep: Path) -> subprocess.Popen[str]:
    wait_for_an_idle_cluster()
    args = [sys.executable, str(ROOT / "eval.py"), "-m", f"hydra.sweep.dir={sweep}", "eval.max_episodes_rendered=0"]
    return subprocess.Popen([*args, *SWEEP], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def episodes(sweep: Path, shard: int) -> list[dict[str, Any]]:
    files = list(sweep.rglob(f"shard_{shard}_of_2/episodes.jsonl"))
    if not files:
        return []
    return [json.loads(line) for line in files[0].read_text().splitlines(keepends=True) if line.endswith("\n")]


def job_id(sweep: Path, shard: int) -> str:
    """The SLURM job of shard `shard` (array task `shard`: jobs are submitted in shard order)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = sorted(p.name for p in (sweep / ".submitit").glob(f"*_{shard}") if p.is_dir())
        if found:
            return found[-1]
        time.sleep(0.2)
    raise AssertionError(f"no SLURM job for shard {shard} under {sweep / '.submitit'}")


def wait_for_episodes(sweep: Path, shard: int, n: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while len(episodes(sweep, shard)) < n:
        assert proc.poll() is None and time.monotonic() < deadline, "the shard ended before the fault was injected"
        time.sleep(0.1)


def job_log(sweep: Path, job: str) -> str:
    """The job's stderr and stdout, every run of it (submitit appends)."""
    return "".join((sweep / ".submitit" / job / f"{job}_0_log.{kind}").read_text() for kind in ("err", "out"))


def slurm_state(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "--states=all", "-j", job, "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip()


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the sweep did not end:\n{out}\n{err}") from None
    return proc.returncode, out, err


def merged(sweep: Path) -> list[tuple]:
    return [outcome(r) for r in read_json(sweep / "eval_info.json")["episodes"]]


def sweep_under_way(sweep: Path) -> tuple[subprocess.Popen[str], str, str]:
    """The sweep started, once each of its two shard jobs has recorded an episode: (sweep process, job 0, job 1)."""
    proc = start_sweep(sweep)
    jobs = job_id(sweep, 0), job_id(sweep, 1)
    wait_for_episodes(sweep, 0, 1, proc)
    wait_for_episodes(sweep, 1, 1, proc)
    return proc, *jobs


def assert_each_episode_once(sweep: Path) -> None:
    for shard in (0, 1):
        indices = [e["episode_index"] for e in episodes(sweep, shard)]
        assert len(indices) == len(set(indices)) == 6, f"shard {shard}: {indices}"


@pytest.mark.slurm
def test_cancelled_and_killed_jobs_are_named_by_their_state_and_the_rerun_resumes(
    slurm: None,  # noqa: F811
    reference: list[tuple],
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "sweep"
    proc, cancelled, killed = sweep_under_way(sweep)
    subprocess.run(["scancel", cancelled], check=True)  # SIGTERM to every process of the job, SIGKILL 10 s later
    subprocess.run(["scancel", "--signal=KILL", killed], check=True)  # as on node loss or the OOM killer
    kept = {0: len(episodes(sweep, 0)), 1: len(episodes(sweep, 1))}
    rc, out, err = finish(proc)

    assert rc == 1, err
    assert "Traceback" not in out + err and "SlotWorkerError" not in err, err
    assert "2 of 2 jobs of the sweep did not succeed" in err, err
    assert f"job {cancelled} ended without a result (state: CANCELLED): shard 0 of 2; log: " in err, err
    assert f"job {killed} ended without a result (state: {slurm_state(killed)}): shard 1 of 2; log: " in err, err
    assert "it said: stopped by SIGTERM" in err, "the cancelled job stopped cleanly and said so"
    assert "shard 0 of 2 is incomplete" in err and "shard 1 of 2 is incomplete" in err, err
    log = job_log(sweep, cancelled)
    assert "Traceback" not in log and "lerobot_hydra: stopped by SIGTERM" in log, log
    assert not (sweep / "eval_info.json").exists()

    rc, out, err = finish(start_sweep(sweep))
    assert rc == 0, err
    assert len(episodes(sweep, 0)) == 6 and len(episodes(sweep, 1)) == 6
    assert kept[0] < 6 and kept[1] < 6, f"the faults should land mid-shard; recorded before: {kept}"
    assert_each_episode_once(sweep)
    assert merged(sweep) == reference


@pytest.mark.slurm
def test_preempted_jobs_are_requeued_and_resume_with_nothing_lost_or_doubled(
    slurm: None,  # noqa: F811
    reference: list[tuple],
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "sweep"
    proc, by_slurm, by_submitit = sweep_under_way(sweep)
    # Preemption as SLURM requeues (PreemptMode=REQUEUE): SIGTERM to every process, back to the queue.
    subprocess.run(["scontrol", "requeue", by_slurm], check=True)
    # Preemption as submitit handles it (what `job._interrupt()` sends): SIGTERM, then its USR2, and it requeues.
    subprocess.run(["scancel", "--signal=TERM", by_submitit], check=True)
    subprocess.run(["scancel", f"--signal={signal.SIGUSR2.name[3:]}", by_submitit], check=True)
    kept = {0: len(episodes(sweep, 0)), 1: len(episodes(sweep, 1))}
    rc, out, err = finish(proc)

    assert rc == 0, err
    assert "Traceback" not in out + err, err
    for job in (by_slurm, by_submitit):
        log = job_log(sweep, job)
        assert "lerobot_hydra: stopped by" in log and "Traceback" not in log, log
        assert "episodes already recorded" in log, "the requeued job resumed"
    assert "submitit requeued the job" in job_log(sweep, by_submitit)
    assert kept[0] < 6 and kept[1] < 6, f"the preemptions should land mid-shard; recorded before: {kept}"
    assert_each_episode_once(sweep)
    assert merged(sweep) == reference


def test_submitits_sacct_warning_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """On a cluster without accounting submitit warns at every poll, through three handlers; the sweep says it once."""
    import logging

    from lerobot_hydra.launch.outcomes import say_sacct_warning_once

    say_sacct_warning_once()  # what our submitit launchers do before they submit
    submitit_log = logging.getLogger("submitit")
    with caplog.at_level(logging.WARNING):
        for call in range(1, 4):
            submitit_log.warning(
                f"Call #{call} - Bypassing sacct error Command 'sacct' returned non-zero exit status 1., "
                "status may be inaccurate."
            )
        submitit_log.warning("Bypassing signal SIGTERM")  # other warnings pass untouched
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "sacct" in m]) == 1, said
    assert "submitit could not ask SLURM for job states" in said[0]
    assert "Bypassing signal SIGTERM" in said
