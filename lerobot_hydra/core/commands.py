"""Commands printed for the user to paste as they are: override values quoted for Hydra's grammar (a comma
would start a sweep, `=`, spaces, quotes and non-ASCII letters break the parse), then every argument quoted
for the shell."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from functools import cache
from typing import Any


@cache
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _reads_back(text: str, value: str) -> bool:
    from hydra.errors import HydraException

    try:
        override = _parser().parse_override(f"k={text}")
    except HydraException:
        return False
    return not override.is_sweep_override() and override.value() == value


def hydra_value(value: str) -> str:
    """`value` written so that Hydra's override parser reads back exactly this string."""
    if value and _reads_back(value, value):
        return value
    # Double quotes read best inside the shell's single quotes.
    return _quote(value, "'" if '"' in value and "'" not in value else '"')


def _quote(value: str, quote: str) -> str:
    """In a quoted Hydra value the quote is escaped with a backslash, and so is every backslash before a quote
    or before the closing quote (the only places where Hydra reads backslashes as escapes)."""
    escaped = re.sub(rf"(\\*)({quote}|\Z)", lambda m: m[1] * 2 + ("\\" + quote if m[2] else ""), value)
    return f"{quote}{escaped}{quote}"


def hydra_override(key: str, value: str) -> str:
    return f"{key}={hydra_value(value)}"


def shell_command(args: Sequence[str]) -> str:
    """A command line whose arguments reach the program exactly as given, pasted into a POSIX shell."""
    return shlex.join(args)
