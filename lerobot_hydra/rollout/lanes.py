"""A run's tasks over `eval.max_parallel_tasks` lanes, each with its own workers and policy state (runner.py runs a
lane's tasks).

The lanes share one stop event, checked before every step: when a lane fails, or the main thread is interrupted
(Ctrl-C, SLURM's SIGTERM; see stopping.py), every other lane stops at its next step instead of running its tasks
to the end, and the first error is the one raised. What finished is already recorded.

A run's workers are closed at its end, unless its caller hands it the pools (`make_pools`: the Python API's
`WarmPools`, a dynamic shard's blocks): those, and the simulators in them, serve the caller's next run too.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable
from dataclasses import dataclass

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.policies.base import Policy
from lerobot_hydra.processors.pipeline import Pipeline
from lerobot_hydra.rollout.filming import Filming
from lerobot_hydra.rollout.plan import episode_seed
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.recording import step_recorder
from lerobot_hydra.rollout.runner import OnRecord, RolloutContext, TaskWork, run_segment
from lerobot_hydra.vector.task_envs import EnvPool, close_pools, create_pools

Pools = dict[tuple[str, int], EnvPool]
MakePools = Callable[[EnvConfig, list[TaskSpec], int, bool, bool], Pools]


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
    """Pools kept from one run to the next (a `MakePools`): a lane asking for the same tasks and sizes again gets
    the same workers, with the simulators they hold. The owner closes them."""

    def __init__(self) -> None:
        self._kept: dict[tuple, Pools] = {}

    def __call__(self, config: EnvConfig, tasks: list[TaskSpec], n_envs: int, use_async: bool, render: bool) -> Pools:
        key = (tuple(t.key for t in tasks), n_envs, use_async, render)
        if key not in self._kept:
            self._kept[key] = create_pools(config, tasks, n_envs, use_async, render)
        return self._kept[key]

    def close(self) -> None:
        """Closes every kept worker (idempotent)."""
        while self._kept:
            close_pools(self._kept.popitem()[1])


def evaluate(
    settings: LaneSettings,
    work: list[TaskWork],
    build_policy: Callable[[], Policy],
    on_record: OnRecord,
    progress: Progress,
    videos: Filming | None = None,
    finish: bool = True,
    make_pools: MakePools | None = None,
) -> None:
    """Run every task's remaining episodes, `max_parallel_tasks` tasks at a time, each lane with its own
    workers and its own policy state; every record goes to `on_record` as its episode ends.

    `build_policy` makes the policy (a built one: `lambda: policy`); the workers start, and begin building their
    first task's simulators, while it runs (policy loading and simulator creation both take seconds). `finish`:
    call the policy's `finish` at the end (False when the caller evaluates more work with it afterwards).
    `make_pools`: where the lanes' envs come from instead of `create_pools`; the caller then owns (and closes)
    them, so that they, and the simulators their slots hold, serve the caller's next call too."""
    work = [w for w in work if w.episodes]
    if work:
        _Lanes(settings, work, on_record, progress, videos, make_pools).run(build_policy, finish)


class _Lanes:
    def __init__(
        self,
        settings: LaneSettings,
        work: list[TaskWork],
        on_record: OnRecord,
        progress: Progress,
        videos: Filming | None,
        make_pools: MakePools | None,
    ) -> None:
        self.settings, self.progress, self.videos, self.make_pools = settings, progress, videos, make_pools
        self.n_envs = min(settings.batch_size, max(len(w.episodes) for w in work))
        n_lanes = min(settings.max_parallel_tasks, len(work))
        self.lanes = [work[i::n_lanes] for i in range(n_lanes)]
        self.stop = threading.Event()
        self.opened: list[Pools] = []  # pools this run closes at its end (none from `make_pools`: the caller's)
        lock = threading.Lock()

        def locked_record(record: EpisodeRecord) -> None:
            with lock:
                on_record(record)

        self.on_record = locked_record

    def run(self, build_policy: Callable[[], Policy], finish: bool) -> None:
        try:
            with cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="env-start") as starter:
                started = starter.submit(lambda: [self._start_lane(lane) for lane in self.lanes])
                try:
                    built = build_policy()
                except BaseException:
                    started.exception()  # let the start finish, so that every worker it opened is closed below
                    raise
                lane_pools = started.result()
            if (recorder := step_recorder()) is not None:
                # Its slow imports, once no other thread of this run imports: they overlap the simulators that the
                # async workers are building in their own processes.
                recorder.prepare()
            if len(self.lanes) == 1:
                self._run_lane(self.lanes[0], lane_pools[0], built)
            else:
                self._run_parallel(lane_pools, built)
            if finish:
                built.finish()
        finally:
            for pools in self.opened:
                close_pools(pools)

    def _start_lane(self, lane_work: list[TaskWork]) -> Pools:
        s = self.settings
        tasks = [w.task for w in lane_work]
        pools = (self.make_pools or create_pools)(s.env, tasks, self.n_envs, s.use_async, s.render)
        if self.make_pools is None:
            self.opened.append(pools)
        first = segments(lane_work, pools)[0]
        pool = pools[first[0].task.key]
        # Each sub-env builds the simulator of the first episode it will run (mixed) or could run (unmixed),
        # unless it holds one of a task of this segment already (kept pools: it runs that task's episodes).
        # Kept pools are spread over the tasks, so that each sub-env may keep its task's simulator from run to run.
        # A sub-env that will start an episode of the first batch's head task also resets into it now (while the
        # policy loads): the schedule gives sub-env i the i-th of those episodes.
        units = [(w.task, k) for w in first for k in w.episodes][: pool.num_envs]
        head = units[0][0] if units else None
        upcoming = [task for task, _ in units]
        if self.make_pools is not None:
            upcoming = [first[slot % len(first)].task for slot in range(len(upcoming))]
        kept = {w.task for w in first}
        for slot, task in enumerate(upcoming):
            if pool.tasks[slot] not in kept:
                known = self.make_pools is None and task == head
                episode = (units[slot][1], episode_seed(s.base_seed, units[slot][1])) if known else None
                pool.prepare_ahead(slot, task, episode)
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
