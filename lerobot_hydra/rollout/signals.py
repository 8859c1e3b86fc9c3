"""Stopping a run early without losing what finished: Ctrl-C (SIGINT), and what SLURM sends a job: SIGTERM on
cancel, preemption, requeue and at the time limit, and submitit's timeout/preemption signal (SIGUSR2 by default).

While `stop_signals()` is active (main thread only), the first of these signals raises `RunInterrupted` in the main
thread. The episodes in flight are dropped, not finished: they run again on resume, and SLURM kills a job KillWait
seconds (usually 30) after its SIGTERM, often too soon for long episodes to end. Every other lane stops at its next
step (lanes.py), the records already flushed stay, and the run's files are written marked incomplete. Later signals
are noted but not raised, so that this cleanup completes. Workers ignore these signals (vector/worker_signals.py).

Under submitit the timeout/preemption signal is submitit's: its handler checkpoints and requeues the job (within the
presets' `max_num_timeout`; a preemption always). That handler is called once the run has stopped cleanly, instead of
in the middle of the rollout. When it does not requeue, the job stops with a one-line status saying why.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lerobot_hydra.vector.worker_signals import job_signals_blocked, submitit_signal

STATUS_PREFIX = "lerobot_hydra: "
# What each signal means to a user reading the status line.
CAUSES = {
    signal.SIGINT: "Ctrl-C (SIGINT)",
    signal.SIGTERM: "SIGTERM (SLURM: cancel, preemption, requeue or time limit)",
}


class RunInterrupted(BaseException):
    """A stop signal arrived. A BaseException, as KeyboardInterrupt: the `except Exception` of Hydra's job runner and
    of submitit let it pass, so a stopped job writes no error result (the sweep then names the job's SLURM state)."""

    def __init__(self, signum: int, status: str = "") -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.status = status or f"stopped by {self.cause}"  # the one-line report; detailed once the files are written

    @property
    def cause(self) -> str:
        return CAUSES.get(signal.Signals(self.signum), f"{signal.Signals(self.signum).name} (timeout or preemption)")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def summarize(self, recorded: int, planned: int, records_path: Path) -> str:
        """Sets the status line from what the stopped run kept; returns the prefix of its results table's title."""
        self.status = (
            f"stopped by {self.cause}: {recorded} of {planned} episodes recorded in {records_path}, results marked "
            "incomplete; the same command resumes (recorded episodes are kept)"
        )
        return f"INCOMPLETE ({recorded} of {planned} episodes; stopped by {self.cause}): "


def _is_submitit(handler: Any) -> bool:
    return type(getattr(handler, "__self__", None)).__module__.startswith("submitit")


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGINT, SIGTERM (and submitit's requeue signal under submitit) raise `RunInterrupted` once while active."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    requeue = submitit_signal()
    previous: dict[int, Callable[..., Any] | int | None] = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, requeue)
    }
    handled = [signal.SIGINT, signal.SIGTERM] + ([requeue] if _is_submitit(previous[requeue]) else [])
    received: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        # Nothing is logged here: the signal may land inside a logging call (submitit logs the signals it bypasses),
        # and a second write to the same stream then fails as reentrant. The status line is printed once stopped.
        received.append(signum)
        if len(received) == 1:
            raise RunInterrupted(signum)

    def restore() -> None:
        for sig in handled:
            signal.signal(sig, previous[sig])

    for sig in handled:
        signal.signal(sig, on_signal)
    try:
        yield
    except RunInterrupted as stopped:
        restore()
        if requeue in handled and requeue in received:
            _requeue(previous[requeue], requeue, stopped)
        raise
    finally:
        restore()


def print_status(stopped: RunInterrupted) -> None:
    """The one line a stopped run ends with (on stderr: a SLURM job's log, which the sweep's report quotes)."""
    print(f"{STATUS_PREFIX}{stopped.status}", file=sys.stderr, flush=True)


def _requeue(submitit_handler: Any, signum: int, stopped: RunInterrupted) -> None:
    """submitit's handler: checkpoint, `scontrol requeue`, then exit (SystemExit); when it will not requeue it raises,
    which becomes this run's status."""
    try:
        # The requeue makes SLURM SIGTERM every process of the job, `scontrol requeue` itself included: blocked here,
        # so that its child inherits the block and is not killed before it reports success.
        with job_signals_blocked():
            submitit_handler(signum, None)
    except SystemExit:
        stopped.status += "; submitit requeued the job, which resumes from its records when it starts again"
        print_status(stopped)
        raise
    except Exception as err:  # noqa: BLE001 - submitit's UncompletedJobError: not requeued
        reason = str(err).strip().rstrip(".")
        raise RunInterrupted(signum, f"{stopped.status}; submitit did not requeue it ({reason})") from None
