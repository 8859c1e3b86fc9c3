"""User-facing errors: one line that says what was wrong and how to fix it."""

from __future__ import annotations

# The exit status of a run (or a sweep, once merged) that finished with error episodes: simulators that failed
# twice on some episode (rollout/episode_errors.py); their records say which, and the same command runs them again.
EPISODE_ERRORS_EXIT = 3


def episode_errors_line(n_errors: int) -> str:
    """The last line of a run or sweep that finished with error episodes."""
    return (
        f"{n_errors} error episode(s): the simulator failed twice on them (the log says where, the records which); "
        f"the other episodes are evaluated and the same command runs these again (exit code {EPISODE_ERRORS_EXIT})"
    )


class UserError(Exception):
    """A mistake the user can fix. Printed as a single line, without a traceback."""


def missing_extra(module: str, extra: str) -> UserError:
    return UserError(
        f"the optional package '{module}' is not installed; install it with: pip install -e \".[{extra}]\""
    )


def did_you_mean(name: str, valid: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, valid, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def worker_failure() -> str | UserError:
    """Inside a worker's `except`: what to send its parent, the UserError itself (so that the parent reports it
    in one line) or else the traceback."""
    import sys
    import traceback

    err = sys.exc_info()[1]
    return err if isinstance(err, UserError) else traceback.format_exc()
