"""Everything produced from aggregated results, for a single run and a merged sweep alike:
eval_info.json and the console table (plots and experiment loggers hook in here too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lerobot_hydra.records import write_json_atomic
from lerobot_hydra.results import format_table

EVAL_INFO_FILE = "eval_info.json"


def publish(info: dict[str, Any], out_dir: Path, title: str) -> None:
    """Write `eval_info.json` into `out_dir` and print the table."""
    write_json_atomic(out_dir / EVAL_INFO_FILE, info)
    print(format_table(info, f"{title} ({out_dir / EVAL_INFO_FILE})"), flush=True)
