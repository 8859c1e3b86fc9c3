"""User-facing errors: one line that says what was wrong and how to fix it."""

from __future__ import annotations


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
