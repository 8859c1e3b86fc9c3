"""LeRobot's own `lerobot-eval`, from the interpreter running the tests (so the LeRobot line under test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def lerobot_eval_command() -> list[str]:
    script = Path(sys.executable).parent / "lerobot-eval"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lerobot.scripts.lerobot_eval"]


def run_lerobot_eval(
    *args: str, output_dir: Path, env: dict[str, str] | None = None, command: list[str] | None = None
) -> list[float]:
    """Per-episode summed rewards of a `lerobot-eval` run (episode order), one task; `command`: what runs
    lerobot-eval, if not its own script (e.g. tests/helpers/lerobot_eval_rows.py)."""
    command = [*(command or lerobot_eval_command()), *args, f"--output_dir={output_dir}"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1200, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((output_dir / "eval_info.json").read_text())["per_task"][0]["metrics"]["sum_rewards"]
