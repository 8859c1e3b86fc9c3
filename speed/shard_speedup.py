"""One process vs the same workload split into 2 shards running in parallel on this machine.

    python -m speed.shard_speedup

Both sides are timed end to end, process start to exit: `python eval.py <workload>` against
`python eval.py -m <workload> eval.shard_id=0,1 hydra/launcher=local_shards`, which includes the shards'
own imports, submitit's process launching and the merge. Each shard steps one env in its own process
(batch_size=1), so the baseline uses one core and 2 shards can use two. The merged result must equal the
single run episode for episode. Target >= 1.8x on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from speed.harness.timing import ENV, ROOT, timed_eval, verdict

# The random policy runs every episode to its full length: equal-cost episodes, state observations. About
# 150k simulator steps (a few minutes in one process): enough that the fixed costs the sweep adds (its own
# start, process launching, the merge) stay small next to the work, as in real evaluations.
TASKS = [
    "reach-v3",
    "push-v3",
    "drawer-open-v3",
    "door-open-v3",
    "button-press-v3",
    "window-open-v3",
    "drawer-close-v3",
    "plate-slide-v3",
    "faucet-open-v3",
    "handle-press-v3",
]
WORKLOAD = [
    "policy=random",
    "env.obs_type=state",
    f"env.task=[{','.join(TASKS)}]",
    "env.episode_length=500",
    "eval.n_episodes=30",
    "eval.batch_size=1",
    "eval.max_episodes_rendered=0",
]
SHARDS = 2


def timed_sharded(*overrides: str) -> tuple[float, dict, list[float]]:
    """Wall time of the 2-shard local sweep (start to exit, merge included), its merged eval_info.json and
    each shard's evaluation time."""
    with tempfile.TemporaryDirectory() as sweep:
        ids = ",".join(str(k) for k in range(SHARDS))
        args = [
            sys.executable,
            str(ROOT / "eval.py"),
            "-m",
            f"hydra.sweep.dir={sweep}",
            *overrides,
            f"eval.shard_id={ids}",
            "hydra/launcher=local_shards",
        ]
        start = time.perf_counter()
        proc = subprocess.run(args, cwd=ROOT, env=ENV, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"the sharded sweep failed:\n{proc.stdout}\n{proc.stderr}")
        shards = [json.loads(p.read_text())["eval_s"] for p in Path(sweep).rglob("shard_*_of_*.json")]
        return elapsed, json.loads((Path(sweep) / "eval_info.json").read_text()), shards


def main() -> int:
    single_s, single = timed_eval(*WORKLOAD)
    sharded_s, merged, shard_eval_s = timed_sharded(*WORKLOAD)
    strip = [{k: v for k, v in e.items() if k != "wall_s"} for e in single["episodes"]]
    same = strip == [{k: v for k, v in e.items() if k != "wall_s"} for e in merged["episodes"]]
    eval_ratio = single["overall"]["eval_s"] / max(shard_eval_s)
    ok = verdict(
        f"{SHARDS} local shards vs 1 process, {len(single['episodes'])} MetaWorld episodes",
        single_s / sharded_s,
        1.8,
        f"1 process {single_s:.1f} s vs {SHARDS} shards {sharded_s:.1f} s end to end (evaluation alone: "
        f"{eval_ratio:.2f}x); identical records: {same}",
    )
    print(f"info  this machine's ceiling: 2 processes of pure Python run {parallel_ceiling():.2f}x as fast as 1")
    return 0 if ok and same else 1


def _spin(n: int = 20_000_000) -> None:
    total = 0
    for i in range(n):
        total += i


def parallel_ceiling() -> float:
    """Throughput of 2 CPU-bound processes relative to 1 (2.0 on two fully independent cores)."""
    import multiprocessing

    start = time.perf_counter()
    _spin()
    alone = time.perf_counter() - start
    workers = [multiprocessing.Process(target=_spin) for _ in range(SHARDS)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return SHARDS * alone / (time.perf_counter() - start)


if __name__ == "__main__":
    sys.exit(main())
