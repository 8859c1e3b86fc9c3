"""A run's tasks over `eval.max_parallel_tasks` lanes, each with its own workers and policy state (runner.py runs a
lane's tasks).

The lanes share one stop event, checked before every step: when a lane fails, or the main thread is interrupted
(Ctrl-C, SLURM's SIGTERM; see signals.py), every other lane stops at its next step instead of running its tasks
to the end, and the first error is the one raised. What finished is already recorded.

A run's workers are closed at its end, unless its caller hands it the pools (`make_pools`: a run context's
`run.pools.KeptPools`): those, and the simulators in them, serve the caller's next batch of work too.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable
from dataclasses import dataclass

from lerobot_hydra.core.records import EpisodeRecord, TaskKey
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.policies.base import Policy
from lerobot_hydra.processors.pipeline import Pipeline
from lerobot_hydra.rollout.episodes import Unit
from lerobot_hydra.rollout.filming import Filming
from lerobot_hydra.rollout.plan import episode_seed
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.recording import StepRecorder
from lerobot_hydra.rollout.runner import OnRecord, RolloutContext, TaskWork, run_segment
from lerobot_hydra.rollout.schedule import Schedule
from lerobot_hydra.vector.faults import WorkerFaults
from lerobot_hydra.vector.task_envs import EnvPool, close_pools, create_pools

Pools = dict[TaskKey, EnvPool]
# (lane, env, the lane's tasks, sub-envs, in workers, rendering) -> the lane's pool of each task.
MakePools = Callable[[int, EnvConfig, list[TaskSpec], int, bool, bool], Pools]


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
    mixes_tasks: bool = False  # the policy resets rows one at a time (`PolicyConfig.resets_rows`): batches mix tasks
    skip_unread: bool = False  # eval.render=read: sub-envs draw cameras only for the steps the policy reads
    faults: WorkerFaults = WorkerFaults()  # what a lost worker or a failing simulator does to the run
    recorder: StepRecorder | None = None  # eval.recording: receives every episode's steps


def _spread(first: list[TaskWork], n: int) -> list[TaskSpec]:
    """`n` sub-envs' tasks, taken from the segment's tasks in turn, each as often as it has episodes."""
    left = {w.task: len(w.episodes) for w in first}
    out: list[TaskSpec] = []
    turn = 0
    while len(out) < n:
        task = first[turn % len(first)].task
        turn += 1
        if left[task]:
            left[task] -= 1
            out.append(task)
    return out


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
    settings: LaneSettings,
    work: list[TaskWork],
    build_policy: Callable[[], Policy],
    on_record: OnRecord,
    progress: Progress,
    videos: Filming | None = None,
    make_pools: MakePools | None = None,
) -> None:
    """Run every task's remaining episodes, `max_parallel_tasks` tasks at a time, each lane with its own
    workers and its own policy state; every record goes to `on_record` as its episode ends.

    `build_policy` makes the policy (a built one: `lambda: policy`); the workers start, and begin building their
    first task's simulators, while it runs (policy loading and simulator creation both take seconds); whoever
    built the policy tells it when the run is over (`Policy.finish`). `make_pools`: where the lanes' envs come
    from instead of `create_pools`; the caller then owns (and closes) them, so that they, and the simulators their
    slots hold, serve the caller's next call too."""
    work = [w for w in work if w.episodes]
    if work:
        _Lanes(settings, work, on_record, progress, videos, make_pools).run(build_policy)


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
            if (recorder := self.settings.recorder) is not None:
                # Its slow imports, once no other thread of this run imports: they overlap the simulators that the
                # async workers are building in their own processes.
                recorder.prepare()
            if len(self.lanes) == 1:
                self._run_lane(self.lanes[0], lane_pools[0], built)
            else:
                self._run_parallel(lane_pools, built)
        finally:
            for pools in self.opened:
                close_pools(pools)

    def _start_lane(self, lane: int, lane_work: list[TaskWork]) -> Pools:
        s = self.settings
        tasks = [w.task for w in lane_work]
        if self.make_pools is not None:
            pools = self.make_pools(lane, s.env, tasks, self.n_envs, s.use_async, s.render)
        else:
            pools = create_pools(s.env, tasks, self.n_envs, s.use_async, s.render)
            self.opened.append(pools)
        for pool in pools.values():
            pool.watch(s.faults.step_timeout_s)
        first = segments(lane_work, pools)[0]
        pool = pools[first[0].task.key]
        # Each sub-env keeps the simulator it holds of a task of this segment (kept pools), else builds one. Where
        # batches mix tasks (workers, a policy that resets rows one at a time) the sub-envs are spread over the
        # segment's tasks, so that each runs its own task's episodes and builds no other simulator while that task
        # has some; else a batch holds one task, in task order. Each sub-env also resets now, while the policy
        # loads, into the episode the schedule will give it first.
        units = [Unit(w.task, k, episode_seed(s.base_seed, k)) for w in first for k in w.episodes]
        n, kept, mixed = min(pool.num_envs, len(units)), {w.task for w in first}, pool.in_workers and s.mixes_tasks
        fresh = _spread(first, n) if mixed else [u.task for u in units[:n]]
        bound = [held if (held := pool.tasks[slot]) in kept else fresh[slot] for slot in range(n)]
        starts = Schedule(units, mixed=mixed).first_batch(n, bound)
        for slot, task in enumerate(bound):
            if pool.tasks[slot] not in kept:
                unit = starts[slot] if slot < len(starts) else None
                pool.prepare_ahead(slot, task, (unit.index, unit.seed) if unit and unit.task == task else None)
        return pools

    def _run_lane(self, lane_work: list[TaskWork], pools: Pools, lane_policy: Policy) -> None:
        s = self.settings
        ctx = RolloutContext(
            lane_policy,
            s.env_pre,
            s.env_post,
            s.base_seed,
            self.on_record,
            self.videos,
            self.stop,
            s.skip_unread,
            s.faults,
            s.recorder,
        )
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
