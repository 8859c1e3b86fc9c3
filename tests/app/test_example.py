"""examples/train_and_eval.py runs as the docs show it: a training loop evaluating every N steps through one
Evaluator, on a fresh checkout (no Hub, no dataset)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import ROOT


def test_the_training_loop_example_evaluates_every_n_steps() -> None:
    args = ["--steps", "4", "--eval-every", "2", "--episode-length", "10", "env.task=[reach-v3,push-v3]"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_and_eval.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = re.findall(r"^step (\d+): loss ([\d.]+), success ([\d.]+)% .* over (\d+) episodes", proc.stdout, re.M)
    assert [(int(s), int(n)) for s, _, _, n in lines] == [(2, 4), (4, 4)]  # 2 tasks x 2 episodes, twice
