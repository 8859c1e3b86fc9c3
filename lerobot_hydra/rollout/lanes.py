"""A run's tasks over `eval.max_parallel_tasks` lanes, each with its own workers and policy state (runner.py runs a
lane's tasks).

The lanes share one stop event, checked before every step: when a lane fails, or the main thread is interrupted
(Ctrl-C, SLURM's SIGTERM; see stopping.py), every other lane stops at its next step instead of running its tasks
to the end, and the first error is the one raised. What finished is already recorded.

A run's workers are closed at its end, unless it is given `WarmPools` (the Python API's `Evaluator`): those keep
each lane's workers, and the simulators in them, for the next run of the same work.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable
from dataclasses import dataclass

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import EnvConfig
from lerobot_hydra.policies.base import Policy
from lerobot_hydra.processors.pipeline import Pipeline
from lerobot_hydra.rollout.filming import Filming
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.runner import OnRecord, RolloutContext, TaskWork, run_segment
from lerobot_hydra.vector.task_envs import EnvPool, close_pools, create_pools

Pools = dict[tuple[str, int], EnvPool]


@dataclass(frozen=True)
class LaneSettings:
    """What every lane of a run shares: the env (as the run computes it), its processors, and how the episodes
    are spread over sub-envs and lanes."""

    env: EnvConfig
    env_pre: Pipeline
    env_post: Pipeline
    base_seed: int
    batch_size: int  # sub-envs per lane, at most
    use_async: bool  # sub-envs in worker processes (one each) rather than in this process
    max_parallel_tasks: int = 1  # lanes
    render: bool = False  # sub-envs that can render frames (videos)


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


class WarmPools:
    """Each lane's pools, kept from one run to the next while the lane's tasks and sizes stay the same."""

    def __init__(self) -> None:
        self._lanes: dict[int, tuple[tuple, Pools]] = {}

    def lane(self, index: int, key: tuple, create: Callable[[], Pools]) -> Pools:
        """Lane `index`'s pools for `key` (its tasks and sizes): the kept ones, or new ones from `create`."""
        kept = self._lanes.get(index)
        if kept is not None and kept[0] == key:
            return kept[1]
        if kept is not None:
            close_pools(self._lanes.pop(index)[1])
        pools = create()
        self._lanes[index] = (key, pools)
        return pools

    def close(self) -> None:
        """Closes every kept worker (idempotent)."""
        while self._lanes:
            _, (_, pools) = self._lanes.popitem()
            close_pools(pools)


def evaluate(
    settings: LaneSettings,
    work: list[TaskWork],
    build_policy: Callable[[], Policy],
    on_record: OnRecord,
    progress: Progress,
    videos: Filming | None = None,
    warm: WarmPools | None = None,
) -> None:
    """Run every task's remaining episodes, `max_parallel_tasks` tasks at a time, each lane with its own
    workers and its own policy state; every record goes to `on_record` as its episode ends.

    `build_policy` makes the policy (a built one: `lambda: policy`); the workers start, and begin building their
    first task's simulators, while it runs (policy loading and simulator creation both take seconds). With
    `warm`, the workers are taken from it and left open in it (closed when the run fails)."""
    work = [w for w in work if w.episodes]
    if work:
        _Lanes(settings, work, on_record, progress, videos, warm).run(build_policy)


class _Lanes:
    def __init__(
        self,
        settings: LaneSettings,
        work: list[TaskWork],
        on_record: OnRecord,
        progress: Progress,
        videos: Filming | None,
        warm: WarmPools | None,
    ) -> None:
        self.settings, self.progress, self.videos, self.warm = settings, progress, videos, warm
        self.n_envs = min(settings.batch_size, max(len(w.episodes) for w in work))
        n_lanes = min(settings.max_parallel_tasks, len(work))
        self.lanes = [work[i::n_lanes] for i in range(n_lanes)]
        self.stop = threading.Event()
        self.opened: list[Pools] = []  # pools this run closes at its end (none with `warm`: it keeps them)
        lock = threading.Lock()

        def locked_record(record: EpisodeRecord) -> None:
            with lock:
                on_record(record)

        self.on_record = locked_record

    def run(self, build_policy: Callable[[], Policy]) -> None:
        try:
            with cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="env-start") as starter:
                started = starter.submit(lambda: [self._start_lane(i, lane) for i, lane in enumerate(self.lanes)])
                try:
                    built = build_policy()
                except BaseException:
                    started.exception()  # let the start finish, so that every worker it opened is closed below
                    raise
                lane_pools = started.result()
            if len(self.lanes) == 1:
                self._run_lane(self.lanes[0], lane_pools[0], built)
            else:
                self._run_parallel(lane_pools, built)
            built.finish()
        except BaseException:
            if self.warm is not None:
                self.warm.close()  # workers stopped mid-episode or failed: none is reused
            raise
        finally:
            for pools in self.opened:
                close_pools(pools)

    def _pools(self, lane_work: list[TaskWork]) -> Pools:
        s = self.settings
        pools = create_pools(s.env, [w.task for w in lane_work], self.n_envs, s.use_async, s.render)
        if self.warm is None:
            self.opened.append(pools)
        return pools

    def _start_lane(self, index: int, lane_work: list[TaskWork]) -> Pools:
        if self.warm is None:
            pools = self._pools(lane_work)
        else:
            key = (tuple(w.task.key for w in lane_work), self.n_envs, self.settings.use_async, self.settings.render)
            pools = self.warm.lane(index, key, lambda: self._pools(lane_work))
        first = segments(lane_work, pools)[0]
        pool = pools[first[0].task.key]
        # Each sub-env builds the simulator of the first episode it will run (mixed) or could run (unmixed),
        # unless it holds one of a task of this segment already (warm workers: it runs that task's episodes).
        # Kept workers are spread over the tasks, so that each may keep its task's simulator from run to run.
        upcoming = [w.task for w in first for _ in w.episodes][: pool.num_envs]
        kept = {w.task for w in first}
        if self.warm is not None:
            upcoming = [first[slot % len(first)].task for slot in range(len(upcoming))]
        for slot, task in enumerate(upcoming):
            if pool.tasks[slot] not in kept:
                pool.prepare_ahead(slot, task)
        return pools

    def _run_lane(self, lane_work: list[TaskWork], pools: Pools, lane_policy: Policy) -> None:
        s = self.settings
        ctx = RolloutContext(lane_policy, s.env_pre, s.env_post, s.base_seed, self.on_record, self.videos, self.stop)
        for segment in segments(lane_work, pools):
            run_segment(pools[segment[0].task.key], segment, ctx, self.progress)

    def _run_parallel(self, lane_pools: list[Pools], built: Policy) -> None:
        pool = cf.ThreadPoolExecutor(max_workers=len(self.lanes), thread_name_prefix="lane")
        try:
            lane_runs = zip(self.lanes, lane_pools, strict=True)
            futures = [pool.submit(self._run_lane, lane, pools, built.fork()) for lane, pools in lane_runs]
            for future in cf.as_completed(futures):
                future.result()
        except BaseException:
            self.stop.set()  # the other lanes end at their next step; their LaneStopped is a consequence, not reported
            raise
        finally:
            pool.shutdown(wait=True)
