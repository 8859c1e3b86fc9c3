"""Stopping early: an error in one lane stops the others at their next step, Ctrl-C keeps what finished (records on
disk, results marked incomplete, exit 130, no traceback) and the same command resumes, and eval.py exits only once
every process it started (workers, their forkserver, multiprocessing's resource tracker) has."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.rollout.recovery import SimulatorFailed
from lerobot_hydra.vector.faults import WorkerFaults
from tests.conftest import ROOT, read_json, run_eval
from tests.helpers.counting_env import CountingEnvConfig
from tests.rollout.test_vector import run

# Random actions on two MetaWorld tasks in two lanes, each with two worker processes: episodes of ~1 s.
TWO_LANES = (
    "env.task=[reach-v3,push-v3]",
    "policy=random",
    "env.obs_type=state",
    "eval.n_episodes=6",
    "env.episode_length=200",
    "eval.batch_size=2",
    "eval.max_parallel_tasks=2",
)


def session_processes(session: int) -> list[psutil.Process]:
    """Processes still alive in session `session` (a process started with start_new_session leads its own)."""
    alive = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == session and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def test_an_error_in_one_lane_stops_the_other_lanes_at_their_next_step(tmp_path: Path) -> None:
    # Task 0's second episode fails at once; task 1's 40 episodes would take ~9 s of 10 ms steps in the other lane.
    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=2, fail_on_episode=1, step_sleep_s=0.01)
    records: list[EpisodeRecord] = []
    stop = WorkerFaults(on_error="stop")
    with pytest.raises(SimulatorFailed, match="episode 1 fails on purpose"):
        run(cfg, n_episodes=40, batch=1, use_async=False, lanes=2, on_record=records.append, faults=stop)
    other_lane = [r for r in records if r.task_id == 1]
    assert len(other_lane) < 40, "the other lane ran all its episodes before the error was raised"


@pytest.mark.slow
def test_ctrl_c_keeps_finished_episodes_marks_results_incomplete_and_exits_130(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [sys.executable, str(ROOT / "eval.py"), f"hydra.run.dir={out}", "eval.max_episodes_rendered=0", *TWO_LANES]
    proc = subprocess.Popen(
        args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    records = out / "episodes.jsonl"
    deadline = time.monotonic() + 300
    while not (records.exists() and records.read_text().count("\n") >= 1):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before Ctrl-C"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground process group, workers included
    stdout, stderr = proc.communicate(timeout=120)
    leftover = session_processes(proc.pid)

    kept = [json.loads(line) for line in records.read_text().splitlines()]
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "SlotWorkerError" not in stderr, stderr
    assert 1 <= len(kept) < 12, f"Ctrl-C should land mid-run; {len(kept)} of 12 episodes were recorded"
    assert len({(e["task_id"], e["episode_index"]) for e in kept}) == len(kept)
    assert f"lerobot_hydra: stopped by Ctrl-C (SIGINT): {len(kept)} of 12 episodes recorded in {records}" in stderr
    assert f"INCOMPLETE ({len(kept)} of 12 episodes; stopped by Ctrl-C (SIGINT))" in stdout, stdout
    info = read_json(out / "eval_info.json")
    assert info["complete"] is False and info["overall"]["n_episodes"] == len(kept)
    assert read_json(out / "shard_0_of_1.json")["complete"] is False
    assert not leftover, f"processes of the run outlived it: {leftover}"

    resumed = run_eval(*TWO_LANES, out_dir=out)
    assert f"{len(kept)} episodes already recorded, {12 - len(kept)} to run" in resumed.stdout + resumed.stderr
    info = read_json(out / "eval_info.json")
    assert info["complete"] is True and info["overall"]["n_episodes"] == 12


# Runs a command as a child subreaper: a descendant still alive when the command exits is handed to this process
# (the kernel reparents it at that moment), so a child of the command that outlives it is seen however briefly.
SUBREAPER = """
import ctypes, json, os, subprocess, sys
import psutil
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
orphans = psutil.Process().children()
print(json.dumps({"rc": proc.returncode, "stderr": proc.stderr, "orphans": [o.pid for o in orphans]}))
for orphan in orphans:
    os.waitpid(orphan.pid, 0)
"""


def test_eval_exits_only_once_every_process_it_started_has(tmp_path: Path) -> None:
    args = [sys.executable, str(ROOT / "eval.py"), f"hydra.run.dir={tmp_path}", "eval.max_episodes_rendered=0"]
    args += ["env.task=[reach-v3]", "policy=random", "env.obs_type=state", "eval.n_episodes=2", "env.episode_length=10"]
    args += ["eval.batch_size=2", "eval.use_async_envs=true"]  # two workers, forked by a forkserver
    launcher = subprocess.run(
        [sys.executable, "-c", SUBREAPER, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    )
    result = json.loads(launcher.stdout.splitlines()[-1])
    assert result["rc"] == 0, result["stderr"]
    assert result["orphans"] == [], "processes started by eval.py (forkserver, resource tracker) outlived it"
