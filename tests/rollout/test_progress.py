"""Progress: bars on a terminal; a line per running task every interval (and one at its end) elsewhere."""

from __future__ import annotations

import fcntl
import logging
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.rollout.progress import Progress
from tests.conftest import ROOT, run_here

TASKS = "env.task=[reach-v3,drawer-close-v3]"
QUICK = (
    TASKS,
    "policy=random",
    "env.obs_type=state",
    "env.episode_length=30",
    "eval.n_episodes=4",
    "eval.batch_size=2",
)
LINE = re.compile(r"\] - (\S+) (\S+): (\d+)/(\d+) episodes, (\S+) success, \d+ s$")


def record(k: int, success: bool) -> EpisodeRecord:
    return EpisodeRecord("g", 0, "t", "t", k, k, success, 0.0, 0.0, 1, 0.0)


def test_without_a_terminal_each_running_task_logs_a_line_every_interval_and_at_its_end(caplog: Any) -> None:
    progress = Progress(0.1, tty=False)
    with caplog.at_level(logging.INFO, logger="lerobot_hydra"):
        bar = progress.start(TaskSpec("g", 0, "t", "t", 10), total=4, done=0, successes=0)
        time.sleep(0.55)  # no episode ends meanwhile: the lines keep coming
        bar.update(record(0, True))
        bar.update(record(1, False))
        progress.finish(bar)
    lines = [r.getMessage() for r in caplog.records]
    assert 3 <= len(lines) <= 7
    assert lines[0].startswith("g/0 t: 0/4 episodes, - success")
    assert lines[-1].startswith("g/0 t: 2/4 episodes, 50% success")
    deadline = time.monotonic() + 2
    while progress._ticker is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert progress._ticker is None  # nothing left running, so the ticker stopped


def test_eval_without_a_terminal_logs_lines_not_bars(tmp_path: Path, capsys: Any) -> None:
    started = time.monotonic()
    run_here(*QUICK, "eval.progress_interval_s=2", out_dir=tmp_path)
    wall = time.monotonic() - started
    stdout, stderr = capsys.readouterr()
    assert "ep/s" not in stderr and "%|" not in stderr + stdout
    lines = [m for m in map(LINE.search, stdout.splitlines()) if m]
    final = [m for m in lines if m[3] == m[4] == "4"]
    assert [m[2] for m in final] == ["reach-v3", "drawer-close-v3"]
    # One line per task at its end, plus at most one per running task per interval.
    assert 2 <= len(lines) <= 2 + wall / 2 + 1


def test_eval_on_a_terminal_draws_a_bar_per_task(tmp_path: Path) -> None:
    args = [sys.executable, str(ROOT / "eval.py"), f"hydra.run.dir={tmp_path}", "eval.max_episodes_rendered=0", *QUICK]
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(args, cwd=ROOT, stdin=slave, stdout=subprocess.PIPE, stderr=slave, close_fds=True)
    os.close(slave)
    terminal = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        terminal += chunk
    os.close(master)
    stdout = proc.stdout.read().decode() if proc.stdout else ""
    assert proc.wait(timeout=300) == 0
    screen = terminal.decode(errors="replace")
    for name in ("reach-v3", "drawer-close-v3"):
        assert re.search(rf"{name}: 100%\|.*\| 4/4 .*success \d+%", screen), screen[-2000:]
    assert not any(LINE.search(line) for line in stdout.splitlines())
