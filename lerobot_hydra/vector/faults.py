"""What a worker's loss or failure looks like to the parent, and a run's settings for it (`WorkerFaults`).

A worker is lost when its process ends (any signal, any exit) or when a call (step, reset, a simulator build) gets
no answer within `eval.step_timeout_s` (the watchdog; the worker is then killed). The vector env raises
`WorkerLost` naming each lost sub-env and why; the rollout replaces the worker and runs its episodes again
(rollout/recovery.py). A sub-env whose simulator raises is not lost: `SubEnvFailed` carries the exception's
message and traceback, and the rollout runs the episode again or records it as an error episode
(rollout/episode_errors.py), or, with `eval.on_error=stop`, reports it in one line.
"""

from __future__ import annotations

import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lerobot_hydra.core.errors import UserError


@dataclass(frozen=True)
class WorkerFaults:
    # The longest a worker may take to answer one call (a step, a reset, building a simulator) before it is treated
    # as wedged, killed and replaced. MetaWorld steps take ~1 ms and LIBERO's ~30 ms; a LIBERO build ~10 s.
    step_timeout_s: float = 300.0
    # How often a worker may be lost on the same episode before the run ends.
    worker_retries: int = 2
    # What a simulator that raises (or returns a non-finite reward or observation) does to the run: "record" runs
    # the episode once more in a fresh worker, then records it as an error episode; "stop" ends the run in one line.
    on_error: str = "record"


def describe_exit(exitcode: int | None, timeout_s: float | None = None) -> str:
    """Why a worker was lost, with the likely cause."""
    if timeout_s is not None:
        return (
            f"did not answer within eval.step_timeout_s={timeout_s:g} s (a wedged simulator, or one slower than that "
            "setting) and was killed"
        )
    if exitcode is None:
        return "closed its pipe without exiting"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        if -exitcode == signal.SIGKILL:
            return f"was killed by {name} (likely out of memory: the kernel's OOM killer; see `dmesg`)"
        if -exitcode in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE, signal.SIGILL):
            return f"was killed by {name} (a crash in the simulator or a native library)"
        return f"was killed by {name}"
    return f"exited with code {exitcode}"


class WorkerLost(RuntimeError):
    """Sub-envs whose workers died or stopped answering: sub-env -> why (`describe_exit`). The other workers'
    answers to the same call were collected, so every pipe is in step."""

    def __init__(self, lost: dict[int, str]) -> None:
        super().__init__("; ".join(f"the worker of sub-env {i} {why}" for i, why in sorted(lost.items())))
        self.lost = lost


class SubEnvFailed(RuntimeError):
    """A sub-env's `call` raised (in its worker or in this process): its message and traceback."""

    def __init__(self, slot: int, call: str, message: str, traceback: str) -> None:
        super().__init__(f"sub-env {slot} failed in {call}(): {message}")
        self.slot, self.call, self.message, self.traceback = slot, call, message, traceback


def last_line(traceback: str) -> str:
    """The `Type: message` line a formatted traceback ends with."""
    lines = [line for line in traceback.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown error"


def call_in_process(index: int, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`method(*args, **kwargs)` of in-process sub-env `index`; an exception other than a UserError becomes
    `SubEnvFailed`, as in a worker."""
    try:
        return method(*args, **kwargs)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - reported as the simulator's failure, with its traceback
        raise SubEnvFailed(index, name, f"{type(err).__name__}: {err}", traceback.format_exc()) from err
