"""Async (worker processes) vs sync (in-process) vector envs, batch 2, on a step-bound env.

    python benchmarks/async_vs_sync.py

MetaWorld with 480x480 pixel observations rendered by OSMesa on the CPU: each step costs ~100 ms of
rendering, so two workers should nearly double throughput on 2 cores. Target >= 1.7x.
"""

from __future__ import annotations

import sys

from common import timed_eval, verdict

WORKLOAD = [
    "policy=random",
    "env.task=[reach-v3,push-v3]",
    "env.obs_type=pixels_agent_pos",
    "env.episode_length=40",
    "eval.n_episodes=4",
    "eval.batch_size=2",
]


def main() -> int:
    sync_s, sync_info = timed_eval(*WORKLOAD, "eval.use_async_envs=false")
    async_s, async_info = timed_eval(*WORKLOAD, "eval.use_async_envs=true")
    same = sync_info["episodes"] == [
        dict(e, wall_s=s["wall_s"]) for e, s in zip(async_info["episodes"], sync_info["episodes"], strict=True)
    ]
    ok = verdict(
        "async vs sync, batch 2, MetaWorld 480x480 pixels",
        sync_s / async_s,
        1.7,
        f"sync {sync_s:.1f} s vs async {async_s:.1f} s; identical records: {same}",
    )
    return 0 if ok and same else 1


if __name__ == "__main__":
    sys.exit(main())
