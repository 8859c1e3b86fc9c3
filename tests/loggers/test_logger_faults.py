"""Loggers never hold the run (docs/faults.md): a W&B server that cannot be reached costs a bounded time and one
warning; the results are written and the exit code is the evaluation's."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from lerobot_hydra.loggers.base import Bounded
from tests.conftest import read_json, run_eval
from tests.loggers.test_wandb import TINY


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_wandb_server_neither_holds_the_exit_nor_changes_its_code(tmp_path: Path) -> None:
    env = {"WANDB_BASE_URL": f"http://127.0.0.1:{closed_port()}", "WANDB_API_KEY": "x" * 40}
    started = time.monotonic()
    # On main this process outlived its results by more than six minutes; the timeout here is a generous bound.
    proc = run_eval(
        *TINY,
        "logger=wandb",
        "logger.wandb.mode=online",
        "logger.wandb.timeout_s=5",
        out_dir=tmp_path,
        env=env,
        timeout=240,
        check=False,
    )
    took = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert read_json(tmp_path / "eval_info.json")["overall"]["n_episodes"] == 4, "the results are written"
    assert "logger.wandb did not finish within logger.wandb.timeout_s=5 s and was left behind" in out, out
    assert "Traceback" not in out
    print(f"eval.py with an unreachable W&B server exited after {took:.1f} s")


class Hanging:
    """A sink whose every call hangs (a tracking server that accepts the connection and never answers)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def log_results(self, *args: object) -> None:
        self.release.wait()

    def log_sweep(self, *args: object) -> None:
        raise ConnectionError("the server closed the connection")


def test_a_hanging_or_raising_logger_call_is_left_behind_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sink = Hanging()
    bounded = Bounded("hanging", sink, timeout_s=0.5)
    try:
        bounded.log_results(None, tmp_path, None, {})  # type: ignore[arg-type]
        bounded.log_sweep({}, tmp_path, None, {})  # type: ignore[arg-type]
    finally:
        sink.release.set()
    assert [r.getMessage() for r in caplog.records] == [
        f"logger.hanging did not finish within logger.hanging.timeout_s=0.5 s and was left behind; the results are "
        f"on disk in {tmp_path}",
        f"logger.hanging failed (ConnectionError: the server closed the connection); the results are on disk in "
        f"{tmp_path}",
    ]
