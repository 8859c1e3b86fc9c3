"""`python eval.py --cfg job` wall time: no heavy import (torch, simulators, lerobot, wandb) before it is needed.

    python -m speed.startup

Prints the best of 5 runs as a ratio against the 1 s budget (PASS when it is under 1 s), and a plain
`python -c pass` start measured in the same run for scale.
"""

from __future__ import annotations

import subprocess
import sys
import time

from speed.harness.timing import ENV, ROOT


def best_of(args: list[str], n: int = 5) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(args, cwd=ROOT, env=ENV, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    interpreter = best_of([sys.executable, "-c", "pass"])
    cfg = best_of([sys.executable, str(ROOT / "eval.py"), "--cfg", "job"])
    ok = cfg <= 1.0
    print(
        f"{'PASS' if ok else 'FAIL'}  python eval.py --cfg job: {cfg:.2f} s = {1.0 / cfg:.2f}x the 1 s budget "
        f"(a bare interpreter start: {interpreter:.2f} s)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
