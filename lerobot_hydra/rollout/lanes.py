"""A run's tasks over `eval.max_parallel_tasks` lanes, each with its own workers and policy state (runner.py runs a
lane's tasks).

The lanes share one stop event, checked before every step: when a lane fails, or the main thread is interrupted
(Ctrl-C, SLURM's SIGTERM; see stopping.py), every other lane stops at its next step instead of running its tasks
to the end, and the first error is the one raised. What finished is already recorded.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.policies.base import Policy
from lerobot_hydra.processors.pipeline import Pipeline
from lerobot_hydra.rollout.filming import Filming
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.runner import OnRecord, RolloutContext, TaskWork, run_segment
from lerobot_hydra.vector.task_envs import EnvPool, close_pools, create_pools

Pools = dict[tuple[str, int], EnvPool]
MakePools = Callable[[EnvConfig, list[TaskSpec], int, bool, bool], Pools]


def segments(lane_work: list[TaskWork], pools: Pools) -> list[list[TaskWork]]:
    """The lane's tasks in runs of consecutive tasks that share a pool (the same spaces): each run's tasks may
    mix in one batch."""
    out: list[list[TaskWork]] = []
    for w in lane_work:
        if out and pools[out[-1][0].task.key] is pools[w.task.key]:
            out[-1].append(w)
        else:
            out.append([w])
    return out


def evaluate(
    env_cfg: EnvConfig,
    work: list[TaskWork],
    build_policy: Callable[[], Policy],
    env_pre: Pipeline,
    env_post: Pipeline,
    base_seed: int,
    batch_size: int,
    use_async: bool,
    max_parallel_tasks: int,
    on_record: OnRecord,
    progress: Progress,
    render: bool = False,
    videos: Filming | None = None,
    finish: bool = True,
    make_pools: MakePools | None = None,
) -> None:
    """Run every task's remaining episodes, `max_parallel_tasks` tasks at a time, each lane with its own
    workers and its own policy state.

    `build_policy` makes the policy (a built one: `lambda: policy`); the workers start, and begin building their
    first task's simulators, while it runs (policy loading and simulator creation both take seconds). `finish`:
    call the policy's `finish` at the end (False when the caller evaluates more work with it afterwards).
    `make_pools`: where the lanes' envs come from instead of `create_pools`; the caller then owns (and closes)
    them, so that they, and the simulators their slots hold, serve the caller's next call too.
    """
    work = [w for w in work if w.episodes]
    if not work:
        return
    n_envs = min(batch_size, max(len(w.episodes) for w in work))
    n_lanes = min(max_parallel_tasks, len(work))
    lanes = [work[i::n_lanes] for i in range(n_lanes)]
    lock = threading.Lock()
    stop = threading.Event()

    def locked_record(record: EpisodeRecord) -> None:
        with lock:
            on_record(record)

    def start_lane(lane_work: list[TaskWork]) -> Pools:
        pools = (make_pools or create_pools)(env_cfg, [w.task for w in lane_work], n_envs, use_async, render)
        if make_pools is None:
            opened.append(pools)
        first = segments(lane_work, pools)[0]
        pool = pools[first[0].task.key]
        # Each sub-env builds the simulator of the first episode it will run (mixed) or could run (unmixed).
        upcoming = [w.task for w in first for _ in w.episodes][: pool.num_envs]
        for slot, task in enumerate(upcoming):
            pool.prepare_ahead(slot, task)
        return pools

    def run_lane(lane_work: list[TaskWork], pools: Pools, lane_policy: Policy) -> None:
        ctx = RolloutContext(lane_policy, env_pre, env_post, base_seed, locked_record, videos, stop)
        for segment in segments(lane_work, pools):
            run_segment(pools[segment[0].task.key], segment, ctx, progress)

    opened: list[Pools] = []
    try:
        with cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="env-start") as starter:
            started = starter.submit(lambda: [start_lane(lane) for lane in lanes])
            try:
                built = build_policy()
            except BaseException:
                started.exception()  # let the start finish, so that every worker it opened is closed below
                raise
            lane_pools = started.result()
        if n_lanes == 1:
            run_lane(lanes[0], lane_pools[0], built)
        else:
            pool = cf.ThreadPoolExecutor(max_workers=n_lanes, thread_name_prefix="lane")
            try:
                lane_runs = zip(lanes, lane_pools, strict=True)
                futures = [pool.submit(run_lane, lane, pools, built.fork()) for lane, pools in lane_runs]
                for future in cf.as_completed(futures):
                    future.result()
            except BaseException:
                stop.set()  # the other lanes end at their next step; their LaneStopped is a consequence, not reported
                raise
            finally:
                pool.shutdown(wait=True)
        if finish:
            built.finish()
    finally:
        for pools in opened:
            close_pools(pools)
