"""Killing an eval.py run's simulator workers from outside, as the OOM killer does (the MetaWorld fault test and the
soak script speed/soak_worker_kills.py)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def worker_pids(root: int) -> list[int]:
    """The simulator workers of run `root`: the children of its multiprocessing forkserver, or its foreign workers
    (env.python: the children of `python -m lerobot_hydra.vector.foreign_worker --server`)."""
    try:
        tree = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    workers = []
    for process in tree:
        try:
            command = " ".join(process.cmdline())
            if "forkserver" in command:
                workers.extend(child.pid for child in process.children())
            elif "lerobot_hydra.vector.foreign_worker --server" in command:
                workers.extend(child.pid for child in process.children())
        except psutil.Error:
            continue
    return workers


def kill_a_worker(root: int, rng: random.Random) -> int | None:
    """SIGKILLs one of run `root`'s workers, chosen by `rng`; its pid, or None when it has none right now."""
    pids = worker_pids(root)
    if not pids:
        return None
    pid = rng.choice(sorted(pids))
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return pid


def start_eval(out_dir: Path, overrides: list[str]) -> subprocess.Popen[str]:
    args = [sys.executable, str(ROOT / "eval.py"), f"hydra.run.dir={out_dir}", "eval.max_episodes_rendered=0"]
    return subprocess.Popen(
        [*args, *overrides], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def recorded(out_dir: Path) -> int:
    path = out_dir / "episodes.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def outcomes(out_dir: Path) -> list[dict]:
    """The run's episode records, ordered, without their wall time (the one field a restart changes)."""
    rows = [json.loads(line) for line in (out_dir / "episodes.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("wall_s", None)
    return sorted(rows, key=lambda r: (r["task_group"], r["task_id"], r["episode_index"]))


def wait_for_records(proc: subprocess.Popen[str], out_dir: Path, n: int, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while recorded(out_dir) < n:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the run ended (or timed out) before recording {n} episodes")
        time.sleep(0.05)
