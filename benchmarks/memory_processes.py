"""Peak memory and live worker processes of a multi-task run, against a one-task run measured alongside.

    python benchmarks/memory_processes.py

MetaWorld `easy` (28 tasks) with batch 2 must hold no more than one task's workers at any time: the peak
number of live env workers equals the batch size, and the peak resident memory of the whole process tree
stays within 1.25x of a run of a single task with the same batch (ratio printed; lower is better).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

import psutil
from common import ENV, ROOT

BATCH = 2


def sample_run(task: str) -> tuple[float, int, list[tuple[float, int]]]:
    """(peak RSS MB of the process tree, peak live workers, [(t, workers)] timeline)."""
    with tempfile.TemporaryDirectory() as out:
        args = [
            sys.executable,
            str(ROOT / "eval.py"),
            f"hydra.run.dir={out}",
            f"env.task={task}",
            "eval.n_episodes=2",
            f"eval.batch_size={BATCH}",
        ]
        proc = subprocess.Popen(args, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        root = psutil.Process(proc.pid)
        start, peak_rss, peak_workers, timeline = time.perf_counter(), 0.0, 0, []
        while proc.poll() is None:
            try:
                tree = [root, *root.children(recursive=True)]
                rss = sum(p.memory_info().rss for p in tree) / 2**20
                # Workers hang under the forkserver (our child); the forkserver and resource tracker do not count.
                workers = sum(1 for p in tree if p.pid != root.pid and p.ppid() != root.pid)
            except psutil.Error:
                continue
            peak_rss, peak_workers = max(peak_rss, rss), max(peak_workers, workers)
            timeline.append((round(time.perf_counter() - start, 1), workers))
            time.sleep(0.05)
        if proc.returncode != 0:
            raise SystemExit(f"eval.py failed for env.task={task}")
        return peak_rss, peak_workers, timeline


def main() -> int:
    one_rss, one_workers, _ = sample_run("reach-v3")
    many_rss, many_workers, timeline = sample_run("easy")
    changes = [timeline[0]] + [b for a, b in zip(timeline, timeline[1:], strict=False) if a[1] != b[1]]
    print(f"live workers over time (t s, workers) for easy: {changes[:12]}{' …' if len(changes) > 12 else ''}")
    ratio = many_rss / one_rss
    ok = many_workers <= BATCH and ratio <= 1.25
    print(
        f"{'PASS' if ok else 'FAIL'}  28-task run vs 1-task run, batch {BATCH}: peak RSS {many_rss:.0f} MB vs "
        f"{one_rss:.0f} MB = {ratio:.2f}x (target <= 1.25x); peak live workers {many_workers} vs {one_workers} "
        f"(target <= {BATCH})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
