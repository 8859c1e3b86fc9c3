"""Job-control signals belong to the main process: worker processes and their forkserver ignore them.

SLURM sends SIGTERM (cancel, preemption, requeue, time limit) and submitit's timeout/preemption signal (SIGUSR2, or
SUBMITIT_PREEMPT_SIGNAL) to every process of a job, and Ctrl-C sends SIGINT to the whole foreground process group.
A worker killed by one would turn a clean stop into a crash of its sub-env; instead the main process decides
(lerobot_hydra/rollout/stopping.py) and closes its workers itself, with SIGKILL where a worker does not answer.
"""

from __future__ import annotations

import atexit
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

JOB_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


def submitit_signal() -> signal.Signals:
    """The signal submitit has SLURM send before the time limit and on preemption (SUBMITIT_PREEMPT_SIGNAL)."""
    signum = getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), None)
    return signum if isinstance(signum, signal.Signals) else signal.SIGUSR2


def job_signals() -> set[signal.Signals]:
    return {*JOB_SIGNALS, submitit_signal()}


def ignore_job_signals() -> None:
    for sig in job_signals():
        signal.signal(sig, signal.SIG_IGN)


@contextmanager
def job_signals_blocked() -> Iterator[None]:
    """Processes started meanwhile (the forkserver, multiprocessing's resource tracker: fork and exec, which resets
    handlers but keeps the signal mask) never see job signals; this thread gets any that arrived once it unblocks."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, job_signals())
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


# Worker processes started and not closed yet (slot_vector). multiprocessing's exit handler terminates daemon children
# with SIGTERM, which workers ignore, then joins them without a timeout: a worker left open by an aborted close would
# hang the exit, so it is killed first.
OPEN_WORKERS: set[Any] = set()


@atexit.register
def _kill_open_workers() -> None:
    for process in list(OPEN_WORKERS):
        if process.is_alive():
            process.kill()
