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
from lerobot_hydra.envs.base import EnvConfig
from lerobot_hydra.policies.base import Policy
from lerobot_hydra.processors.pipeline import Pipeline
from lerobot_hydra.rollout.filming import Filming
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.runner import OnRecord, RolloutContext, TaskWork, run_task
from lerobot_hydra.vector.task_envs import TaskVectorEnv, close_task_vector_envs, create_task_vector_envs


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
) -> None:
    """Run every task's remaining episodes, `max_parallel_tasks` tasks at a time, each lane with its own
    workers and its own policy state.

    `build_policy` makes the policy (a built one: `lambda: policy`); the workers start, and begin building their
    first task's simulators, while it runs (policy loading and simulator creation both take seconds).
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

    def start_lane(lane_work: list[TaskWork]) -> list[TaskVectorEnv]:
        envs = create_task_vector_envs(env_cfg, [w.task for w in lane_work], n_envs, use_async, render)
        opened.append(envs)
        vecs = [envs[w.task.group][w.task.task_id] for w in lane_work]
        for slot in range(min(vecs[0].num_envs, len(lane_work[0].episodes))):
            vecs[0].prepare_ahead(slot, lane_work[0].task)
        return vecs

    def run_lane(lane_work: list[TaskWork], vecs: list[TaskVectorEnv], lane_policy: Policy) -> None:
        ctx = RolloutContext(lane_policy, env_pre, env_post, base_seed, locked_record, videos, stop)
        for j, w in enumerate(lane_work):
            following = vecs[j + 1] if j + 1 < len(vecs) else None
            next_task = following.task if following is not None and following.pool is vecs[j].pool else None
            run_task(vecs[j], w, ctx, progress, next_task)

    opened: list[dict[str, dict[int, TaskVectorEnv]]] = []
    try:
        with cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="env-start") as starter:
            started = starter.submit(lambda: [start_lane(lane) for lane in lanes])
            try:
                built = build_policy()
            except BaseException:
                started.exception()  # let the start finish, so that every worker it opened is closed below
                raise
            lane_vecs = started.result()
        if n_lanes == 1:
            run_lane(lanes[0], lane_vecs[0], built)
        else:
            pool = cf.ThreadPoolExecutor(max_workers=n_lanes, thread_name_prefix="lane")
            try:
                futures = [
                    pool.submit(run_lane, lane, vecs, built.fork()) for lane, vecs in zip(lanes, lane_vecs, strict=True)
                ]
                for future in cf.as_completed(futures):
                    future.result()
            except BaseException:
                stop.set()  # the other lanes end at their next step; their LaneStopped is a consequence, not reported
                raise
            finally:
                pool.shutdown(wait=True)
        built.finish()
    finally:
        for envs in opened:
            close_task_vector_envs(envs)
