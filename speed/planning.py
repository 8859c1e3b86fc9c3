"""Planning and the shard file scale with the plan's tasks, not with its episodes.

    python -m speed.planning

For MetaWorld's MT50 (the real task list), times what a run does before its first episode: the shard's plan
(`sharding.shard_plan`), opening its dir (`store.RunStore`: lock, shard file written, nothing recorded yet)
and the work list (`evaluation.plan_work`), for 2,000 and 20,000 episodes per task, best of 3, and reads the
shard file's size at the start and after episodes were recorded. Targets: 10x the episodes take at most 12x
the time (linear; main took 3.2 s and 42.5 s here, its shard file 4.8 and 48.8 MB, rewritten every 5 s);
the shard file does not grow with the episodes (at most 1.1x) nor while the run records (1.0x).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig
from lerobot_hydra.rollout.plan import shard_plan
from lerobot_hydra.run.work import plan_work
from lerobot_hydra.store.run_store import RunStore

TASKS = MetaWorldEnvConfig(task="all").tasks()
RECORDED = 1_000


def plan_once(n_episodes: int) -> tuple[float, int, int]:
    """Seconds to plan and open a fresh run dir; the shard file's bytes at the start and after RECORDED records."""
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        plan = shard_plan([t.key for t in TASKS], n_episodes, 0, 1)
        with RunStore(Path(out), {"n_episodes": n_episodes}, 0, 1, TASKS, plan, "") as store:
            work = plan_work(TASKS, plan, store)
            elapsed = time.perf_counter() - start
            assert sum(len(w.episodes) for w in work) == len(TASKS) * n_episodes
            at_start = store.path.stat().st_size
            task = TASKS[0]
            for k in range(RECORDED):
                record = EpisodeRecord(
                    task.task_group, task.task_id, task.name, task.description, k, k, True, 1, 1, 5, 0.1
                )
                store.add(record)
            while_running = store.path.stat().st_size
    return elapsed, at_start, while_running


def main() -> int:
    results = {}
    for n in (2_000, 20_000):
        runs = [plan_once(n) for _ in range(3)]
        results[n] = (min(r[0] for r in runs), runs[0][1], runs[0][2])
        print(f"MT50 x {n:,} episodes: plan + open + work list {results[n][0]:.3f} s, shard file {results[n][1]:,} B")
    (small_s, small_b, _), (big_s, big_b, big_running) = results[2_000], results[20_000]
    ok = [
        _verdict("time, 10x the episodes", big_s / small_s, 12.0, f"{small_s:.3f} s -> {big_s:.3f} s"),
        _verdict("shard file, 10x the episodes", big_b / small_b, 1.1, f"{small_b:,} B -> {big_b:,} B"),
        _verdict(
            f"shard file after {RECORDED:,} records", big_running / big_b, 1.0, f"{big_b:,} B -> {big_running:,} B"
        ),
    ]
    return 0 if all(ok) else 1


def _verdict(name: str, ratio: float, limit: float, detail: str) -> bool:
    passed = ratio <= limit
    print(f"{'PASS' if passed else 'FAIL'}  {name}: {ratio:.2f}x (target <= {limit:.2f}x)  {detail}", flush=True)
    return passed


if __name__ == "__main__":
    sys.exit(main())
