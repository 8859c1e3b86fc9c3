"""Peak memory and live worker processes of a multi-task run, against single-task runs measured alongside.

    python -m speed.memory_processes

MetaWorld `easy` (28 tasks) with batch 2 must hold no more than one task's batch at any time: the peak
number of live env workers equals the batch size, and the workers' peak resident memory stays within 1.25x
of the largest peak among runs of each of its tasks alone with the same batch (ratio printed; lower is
better). The whole process tree's peak is printed too (information: the parent also holds the records and
draws a plot whose size grows with the task count). About 2 minutes.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

import psutil

from speed.harness.timing import ENV, ROOT

BATCH = 2


def sample_run(task: str) -> tuple[float, float, int, list[tuple[float, int]]]:
    """(peak RSS MB of the process tree, of the workers, peak live workers, [(t, workers)] timeline)."""
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
        start, peak_rss, peak_worker_rss, peak_workers, timeline = time.perf_counter(), 0.0, 0.0, 0, []
        while proc.poll() is None:
            try:
                tree = [root, *root.children(recursive=True)]
                rss = sum(p.memory_info().rss for p in tree) / 2**20
                # Workers hang under the forkserver (our child); the forkserver and resource tracker do not count.
                workers = [p for p in tree if p.pid != root.pid and p.ppid() != root.pid]
                worker_rss = sum(p.memory_info().rss for p in workers) / 2**20
            except psutil.Error:
                continue
            peak_rss, peak_worker_rss = max(peak_rss, rss), max(peak_worker_rss, worker_rss)
            peak_workers = max(peak_workers, len(workers))
            timeline.append((round(time.perf_counter() - start, 1), len(workers)))
            time.sleep(0.05)
        if proc.returncode != 0:
            raise SystemExit(f"eval.py failed for env.task={task}")
        return peak_rss, peak_worker_rss, peak_workers, timeline


def main() -> int:
    from lerobot_hydra.envs.metaworld import expand_tasks

    singles = {name: sample_run(name) for _, names in expand_tasks("easy") for name in names}
    heaviest = max(singles, key=lambda name: singles[name][1])
    one_rss, one_worker_rss, one_workers, _ = singles[heaviest]
    many_rss, many_worker_rss, many_workers, timeline = sample_run("easy")
    changes = [timeline[0]] + [b for a, b in zip(timeline, timeline[1:], strict=False) if a[1] != b[1]]
    print(f"live workers over time (t s, workers) for easy: {changes[:12]}{' …' if len(changes) > 12 else ''}")
    ratio = many_worker_rss / one_worker_rss
    ok = many_workers <= BATCH and ratio <= 1.25
    print(
        f"{'PASS' if ok else 'FAIL'}  28-task run vs its heaviest task alone ({heaviest}), batch {BATCH}: workers' "
        f"peak RSS {many_worker_rss:.0f} MB vs {one_worker_rss:.0f} MB = {ratio:.2f}x (target <= 1.25x); "
        f"peak live workers {many_workers} vs {one_workers} (target <= {BATCH})"
    )
    print(f"info  whole process tree: peak RSS {many_rss:.0f} MB vs {one_rss:.0f} MB = {many_rss / one_rss:.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
