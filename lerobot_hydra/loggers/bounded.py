"""Loggers never hold the run: each call of a logger is bounded in time, and so is the exit after one.

Every sink built from `logger.<name>` is wrapped in `base.Bounded`: each call runs in a daemon thread and is given
`logger.<name>.timeout_s` seconds (default 60, base.py); past that it is left behind with one warning (the
results are on disk already) and the run goes on. A logger library can also hold the exit itself (W&B's atexit hook
waits for its service to upload, which retries for minutes when the server is unreachable): once any logger has been
called, `bounded_exit` gives the interpreter's shutdown `EXIT_GRACE_S` seconds, then ends the process with the
evaluation's exit code.
"""

from __future__ import annotations

import contextvars
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("lerobot_hydra")

EXIT_GRACE_S = 10.0
# Whether a logger has been called in this process (then the exit is bounded).
_called: list[bool] = []


def call_bounded(name: str, timeout_s: float, out_dir: Path, call: Callable[..., None], *args: Any) -> None:
    """`call(*args)` of logger `name` in a daemon thread, given `timeout_s` seconds; a failure or a timeout is one
    warning."""
    _called.append(True)
    failed: list[BaseException] = []
    context = contextvars.copy_context()  # the caller's context variables (Trackio keeps its active run in one)

    def target() -> None:
        try:
            context.run(call, *args)
        except Exception as err:  # noqa: BLE001 - a logger never fails the evaluation
            failed.append(err)

    thread = threading.Thread(target=target, name=f"logger-{name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        log.warning(
            "logger.%s did not finish within logger.%s.timeout_s=%g s and was left behind; the results are on "
            "disk in %s",
            name,
            name,
            timeout_s,
            out_dir,
        )
    elif failed:
        err = failed[0]
        log.warning("logger.%s failed (%s: %s); the results are on disk in %s", name, type(err).__name__, err, out_dir)


def bounded_exit(code: int) -> None:
    """Call as the process is about to exit with `code`: when a logger was called, the shutdown (atexit hooks of
    logger libraries included) gets `EXIT_GRACE_S` seconds, then the process ends with `code`."""
    if not _called:
        return

    def force() -> None:
        time.sleep(EXIT_GRACE_S)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)

    threading.Thread(target=force, name="bounded-exit", daemon=True).start()
