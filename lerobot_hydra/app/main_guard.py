"""A script that calls the Python API at its top level, outside `if __name__ == "__main__":`, is refused in one line.

The env workers come from a forkserver, and every process it starts imports the user's script again (as
`__mp_main__`) to find what it was started with: an unguarded call would then run again inside each worker and
fail there with multiprocessing's bootstrapping RuntimeError and broken pipes. The check reads the script's own
source (the line its top level is executing) before any process starts, and ends the script with one line.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import FrameType


def _is_main_test(node: ast.expr) -> bool:
    """`__name__ == "__main__"`, either way round."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)):
        return False
    sides = {ast.unparse(node.left), ast.unparse(node.comparators[0])}
    return sides == {"__name__", "'__main__'"}


def _guarded_lines(source: str) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _script_top_level(frame: FrameType | None) -> FrameType | None:
    """The frame of the `__main__` script's top level in the calling stack, if the stack has one."""
    while frame is not None:
        if frame.f_globals.get("__name__") == "__main__" and frame.f_code.co_name == "<module>":
            return frame
        frame = frame.f_back
    return None


def check_main_guard(api_call: str) -> None:
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    top = _script_top_level(sys._getframe(1))
    if top is None or script is None or not Path(script).is_file() or top.f_code.co_filename != script:
        return  # an interactive session, a notebook, python -c, or a call from a function another module runs
    try:
        guarded = _guarded_lines(Path(script).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return
    if top.f_lineno not in guarded:  # the script would crash in its workers: end it here, in one line
        raise SystemExit(
            f"error: {api_call} was called at the top level of {Path(script).name} (line {top.f_lineno}), which the "
            f'env workers import again: put the call under `if __name__ == "__main__":`'
        )
