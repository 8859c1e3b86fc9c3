"""Helpers shared by the benchmark scripts: run eval.py or a Python snippet as a timed subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa"), "PYTHONUNBUFFERED": "1"}


def timed_eval(*overrides: str) -> tuple[float, dict[str, Any]]:
    """Wall time of `python eval.py <overrides>` (process start to exit) and its eval_info.json.
    No videos unless the overrides ask for them."""
    if not any(o.startswith("eval.max_episodes_rendered=") for o in overrides):
        overrides = (*overrides, "eval.max_episodes_rendered=0")
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, str(ROOT / "eval.py"), f"hydra.run.dir={out}", *overrides],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
        )
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"eval.py failed:\n{proc.stdout}\n{proc.stderr}")
        return elapsed, json.loads((Path(out) / "eval_info.json").read_text())


def timed_python(code: str) -> tuple[float, Any]:
    """Wall time of `python -c code` (process start to exit); the snippet prints one JSON value last."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"snippet failed:\n{proc.stderr}")
    return elapsed, json.loads(proc.stdout.strip().splitlines()[-1])


def verdict(name: str, ratio: float, target: float, detail: str) -> bool:
    ok = ratio >= target
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {ratio:.2f}x (target >= {target:.2f}x)  {detail}", flush=True)
    return ok
