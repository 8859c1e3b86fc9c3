"""Async (worker processes) vs sync (in-process) vector envs, batch 2, on a step-bound env.

    python -m speed.async_vs_sync          # needs the libero extra

LIBERO (robosuite) with small 64x64 cameras: each step is ~0.25 s of single-threaded physics and control on
the CPU, and creating a task's simulator ~10 s, so two workers should nearly double throughput on 2 cores.
Whole `python eval.py` runs, same episodes; the records must be identical. Target >= 1.7x.

A second line (information only, no target) shows MetaWorld with 480x480 pixel observations: OSMesa's
llvmpipe already renders with one thread per core in a single process, so workers gain little there on 2
cores; with one render thread per worker (what the workers use) they win only once cores outnumber them.
"""

from __future__ import annotations

import sys

from speed.harness.timing import timed_eval, verdict

LIBERO = [
    "env=libero",
    "env.task=libero_spatial",
    "env.task_ids=[0]",
    "env.observation_height=64",
    "env.observation_width=64",
    "env.episode_length=20",
    "policy=random",
    "eval.n_episodes=4",
    "eval.batch_size=2",
]
METAWORLD_PIXELS = [
    "policy=random",
    "env.task=[reach-v3,push-v3]",
    "env.obs_type=pixels_agent_pos",
    "env.episode_length=40",
    "eval.n_episodes=4",
    "eval.batch_size=2",
]


def same_episodes(a: dict, b: dict) -> bool:
    strip = [{k: v for k, v in e.items() if k != "wall_s"} for e in a["episodes"]]
    return strip == [{k: v for k, v in e.items() if k != "wall_s"} for e in b["episodes"]]


def main() -> int:
    sync_s, sync_info = timed_eval(*LIBERO, "eval.use_async_envs=false")
    async_s, async_info = timed_eval(*LIBERO, "eval.use_async_envs=true")
    same = same_episodes(sync_info, async_info)
    ok = verdict(
        "async vs sync, batch 2, LIBERO 64x64",
        sync_s / async_s,
        1.7,
        f"sync {sync_s:.1f} s vs async {async_s:.1f} s; identical records: {same}",
    )
    sync_s, sync_info = timed_eval(*METAWORLD_PIXELS, "eval.use_async_envs=false")
    async_s, async_info = timed_eval(*METAWORLD_PIXELS, "eval.use_async_envs=true")
    print(
        f"info  async vs sync, batch 2, MetaWorld 480x480 pixels: {sync_s / async_s:.2f}x "
        f"(sync {sync_s:.1f} s vs async {async_s:.1f} s; identical records: {same_episodes(sync_info, async_info)})"
    )
    return 0 if ok and same else 1


if __name__ == "__main__":
    sys.exit(main())
