"""Rollout: a lane's episodes through its sub-envs, producing one record per episode.

Per step: raw observation -> env pre -> policy -> env post -> step. Episode k of a task is seeded with `seed + k`
whatever the batch, sub-env, lane or shard it runs in; success counts up to and including the step that ended the
episode, and a finished sub-env is never stepped again. When the policy can reset one row's state (`reset_slots`), a
finished sub-env starts the next pending episode at once: of any task of the lane whose sub-envs are in workers (tasks
mixed in one batch; a sub-env switching task builds the new simulator and resets it into its episode in its worker
while the others step on, and joins once ready), else of the batch's task (rollout/schedule.py). Other policies start
a new batch once every episode of the current one has ended (a sub-env that will run the next task builds its
simulator meanwhile). An idle row (`reset_slots` with no seed) costs the policy nothing. A filmed episode
(rollout/filming.py) gets the frame after reset and one after each of its steps, rendered only by the sub-envs whose
episode is filmed; worker sub-envs draw it right after answering the step, while this process runs the policy for the
next one. A lost worker is replaced and the episodes in flight start again (rollout/recovery.py); so do they when a
simulator raises or returns a non-finite reward or observation, its episode then running once more in a fresh worker
before it is recorded as an error episode, or the run ending (episode_errors.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.envs.protocol import INIT_STATE_KEY
from lerobot_hydra.policies.base import (
    DeclaresReads,
    Policy,
    RowResettablePolicy,
    RunsOnClock,
    declares_reads,
    resets_rows,
    runs_on_clock,
)
from lerobot_hydra.processors.observation import RAW_KEY
from lerobot_hydra.processors.pipeline import Pipeline
from lerobot_hydra.rollout.episode_errors import EpisodeErrors, check_finite, error_record
from lerobot_hydra.rollout.episodes import Episode, Unit, as_actions, capture_frames
from lerobot_hydra.rollout.filming import Filming
from lerobot_hydra.rollout.health import TaskBroken
from lerobot_hydra.rollout.plan import TaskWork, episode_seed
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.recording import StepRecorder
from lerobot_hydra.rollout.recovery import Recovery
from lerobot_hydra.rollout.schedule import Schedule
from lerobot_hydra.rollout.task_bars import TaskBars
from lerobot_hydra.vector.faults import SubEnvFailed, WorkerFaults, WorkerLost
from lerobot_hydra.vector.task_envs import EnvPool

log = logging.getLogger("lerobot_hydra")

OnRecord = Callable[[EpisodeRecord], None]


class LaneStopped(Exception):
    """Raised in a lane whose `stop` event is set: another lane failed or the run is being stopped."""


@dataclass
class RolloutContext:
    policy: Policy
    env_pre: Pipeline
    env_post: Pipeline
    base_seed: int
    on_record: OnRecord
    videos: Filming | None = None
    stop: threading.Event | None = None  # checked before every step; set: the episodes in flight are dropped
    skip_unread: bool = False  # eval.render=read: cameras are drawn only for the steps the policy reads
    faults: WorkerFaults = WorkerFaults()  # the run's eval.step_timeout_s, eval.worker_retries, eval.on_error
    recorder: StepRecorder | None = None  # eval.recording: each episode's steps


def run_segment(pool: EnvPool, works: list[TaskWork], ctx: RolloutContext, progress: Progress) -> None:
    """Every episode of `works` (consecutive tasks of a lane that share `pool`), each record emitted (and so
    flushed to disk) the moment its episode ends."""
    units = [Unit(w.task, k, episode_seed(ctx.base_seed, k)) for w in works for k in w.episodes]
    bars = TaskBars(works, progress)
    try:
        _Segment(pool, ctx, units, bars).run()
    finally:
        bars.close()


class _Segment:
    def __init__(self, pool: EnvPool, ctx: RolloutContext, units: list[Unit], bars: TaskBars) -> None:
        self.pool, self.ctx, self.bars = pool, ctx, bars
        n = pool.num_envs
        self.refill = resets_rows(ctx.policy)
        self.schedule = Schedule(units, mixed=self.refill and pool.in_workers)
        self.running: list[Episode | None] = [None] * n
        self.warming: dict[int, Unit] = {}  # sub-envs building the simulator of their next episode's task
        self.starting: dict[int, Unit] = {}  # sub-envs being reset into their episodes (until `_start` returns)
        self.recovery = Recovery(pool.config, ctx.faults.worker_retries)
        self.errors = EpisodeErrors(pool.config, ctx.faults.on_error, self.recovery)
        self.texts = [units[0].task.description if units else ""] * n  # each row's task (an idle row: its last)
        self.batch_task: TaskSpec | None = None  # unmixed: the task of the running batch
        self.obs: Any = None
        self.clocked = runs_on_clock(ctx.policy)  # it reports each row's inference count and latencies
        # Whose cameras the next step draws is asked of the policy, unless it does not say or something (a
        # recording) reads every step.
        self.skip_unread = ctx.skip_unread and declares_reads(ctx.policy) and ctx.recorder is None

    def run(self) -> None:
        owed: set[int] = set()  # filmed sub-envs whose frame of the last step is still to be collected
        try:
            while self.schedule or self.warming or any(self.running):
                if self.ctx.stop is not None and self.ctx.stop.is_set():
                    raise LaneStopped
                try:
                    owed = self._advance(owed)
                except WorkerLost as err:
                    self._recover(err)
                    owed = set()
                except SubEnvFailed as err:
                    self._fault(err)
                    owed = set()
        finally:
            self.pool.prerender_after_steps([])
            self.pool.blind_steps([])
            for episode in self.running:
                if episode is not None and episode.video is not None:
                    episode.video.abort()

    def _advance(self, owed: set[int]) -> set[int]:
        if not any(self.running) and not self.warming:
            self._begin_batch()
        if self.warming:
            ready = self.pool.ready(list(self.warming), wait=not any(self.running))
            if ready:
                self._start({i: self.warming.pop(i) for i in ready}, first=False)
        return self._step(owed) if any(self.running) else owed

    def _in_flight(self, slot: int) -> Unit | None:
        episode = self.running[slot]
        return episode.unit if episode is not None else self.starting.get(slot) or self.warming.get(slot)

    def _recover(self, err: WorkerLost) -> None:
        """Replaces the lost workers and puts every episode in flight back to run again from its start."""
        n = self.pool.num_envs
        self.recovery.lost(err, {i: (self._in_flight(i), self.pool.tasks[i]) for i in range(n)})
        self.schedule.put_back(self._drop_in_flight())
        self._replace(sorted(err.lost))

    def _fault(self, err: SubEnvFailed) -> None:
        """A simulator failed: its episode runs again in a fresh worker, or is recorded as an error episode (or the
        run ends: rollout/episode_errors.py); the other episodes in flight start again (the call that failed left
        their answers unread)."""
        episode, unit = self.running[err.slot], self._in_flight(err.slot)
        step = episode.steps + 1 if episode is not None and err.call == "step" else 0
        retry = self.errors.failed(err, unit, step)
        assert unit is not None
        units = self._drop_in_flight()
        if not retry:
            units.remove(unit)
            init_state = episode.init_state if episode is not None else None
            wall_s = time.perf_counter() - episode.started if episode is not None else 0.0
            record = error_record(unit, err, step, init_state, wall_s)
            self.bars.started(unit.task)
            try:
                self._recorded(unit.task, record)
            except TaskBroken as broken:  # its first episodes all failed: its others are left for a rerun
                log.warning("%s", broken.line)
                units = [u for u in units if u.task.key != broken.key]
                self.schedule.drop(broken.key)
        self.schedule.put_back(units)
        self._replace([err.slot])

    def _recorded(self, task: TaskSpec, record: EpisodeRecord) -> None:
        """A finished episode to the run, and counted in its task's progress even when the run then stops on it."""
        try:
            self.ctx.on_record(record)
        finally:
            self.bars.recorded(task, record)

    def _drop_in_flight(self) -> list[Unit]:
        """Every episode in flight, dropped (their films aborted), to start again from their reset."""
        n = self.pool.num_envs
        units = [u for i in range(n) if (u := self._in_flight(i)) is not None]
        for episode in self.running:
            if episode is not None and episode.video is not None:
                episode.video.abort()
        self.running, self.starting = [None] * n, {}
        self.warming.clear()
        return units

    def _replace(self, slots: list[int]) -> None:
        try:
            self.pool.replace(slots)
        except (WorkerLost, SubEnvFailed) as failed:
            raise self.recovery.not_replaced(failed) from None

    def _begin_batch(self) -> None:
        units = self.schedule.first_batch(self.pool.num_envs, self.pool.tasks)
        self.batch_task = units[0].task
        self._start(dict(enumerate(units)), first=True)
        for i, episode in enumerate(self.running):
            if episode is None:
                self._build_ahead(i)

    def _start(self, starts: dict[int, Unit], first: bool) -> None:
        """Resets the sub-envs in `starts` into their episodes (`first`: a new batch, the other sub-envs idle;
        else the others keep running untouched) and starts the policy's rows for them."""
        n = self.pool.num_envs
        self.starting = dict(starts)
        self.obs, info = self.pool.reset({i: (u.task, u.index, u.seed) for i, u in starts.items()}, first)
        check_finite(self.obs, np.zeros(n), sorted(starts), "reset")
        rest = starts
        if first:
            head = starts[0].task
            self.ctx.policy.reset(head, [u.seed if (u := starts.get(i)) and u.task == head else None for i in range(n)])
            rest = {i: u for i, u in starts.items() if u.task != head}
        by_task: dict[TaskSpec, dict[int, int | None]] = {}
        for i, unit in rest.items():
            by_task.setdefault(unit.task, {})[i] = unit.seed
        for task, seeds in by_task.items():
            cast(RowResettablePolicy, self.ctx.policy).reset_slots(task, seeds)
        now = time.perf_counter()
        videos = self.ctx.videos
        for i, unit in starts.items():
            self.bars.started(unit.task)
            init_state = int(info[INIT_STATE_KEY][i])
            video = videos.start(unit.task, unit.index) if videos is not None and videos.wants(unit.index) else None
            trace = [] if self.ctx.recorder is not None else None
            self.running[i] = Episode(unit, None if init_state < 0 else init_state, now, video, trace=trace)
            self.texts[i] = unit.task.description
        self.starting = {}
        capture_frames(self.pool, self.running, only=set(starts))

    def _step(self, owed: set[int]) -> set[int]:
        """One step of every running episode; returns the filmed sub-envs whose frame is owed."""
        n, running = self.pool.num_envs, self.running
        batch = self.ctx.env_pre({RAW_KEY: self.obs, "task": list(self.texts)})
        action = self.ctx.env_post({"action": self.ctx.policy.select_action(batch)})["action"]
        capture_frames(self.pool, running, only=owed)
        filmed = {i for i, e in enumerate(running) if e is not None and e.video is not None}
        self.pool.prerender_after_steps(sorted(filmed))
        if self.skip_unread:
            reads = cast(DeclaresReads, self.ctx.policy).reads_next()
            self.pool.blind_steps([i for i, read in enumerate(reads) if not read])
        vec, before = self.pool.vec, self.obs
        noop = cast(RunsOnClock, self.ctx.policy).noop_rows() if self.clocked else []
        sent = as_actions(action, n, vec.single_action_space.dtype, noop)
        self.obs, reward, _, _, info = vec.step(sent)
        check_finite(self.obs, reward, [i for i, e in enumerate(running) if e is not None], "step")
        finished = {i for i, e in enumerate(running) if e is not None and info["done"][i]}
        capture_frames(self.pool, running, only=filmed & finished)
        starts: dict[int, Unit] = {}
        for i, episode in enumerate(running):
            if episode is None:
                continue
            success = bool(info["is_success"][i])
            episode.add_step(float(reward[i]), success)
            episode.trace_step(before, sent, i, float(reward[i]), i in finished, success)
            if i in finished:
                running[i] = None
                timing = cast(RunsOnClock, self.ctx.policy).row_timing(i) if self.clocked else None
                record = episode.record(timing)
                episode.hand_over(record, self.ctx.recorder)
                self._recorded(episode.task, record)
                self._free(i, episode.task, starts)
        if starts:
            self._start(starts, first=False)
        return filmed - finished

    def _free(self, i: int, task: TaskSpec, starts: dict[int, Unit]) -> None:
        """Sub-env `i` finished an episode of `task`: it starts its next one now (into `starts`), or once it has
        built that episode's simulator, or idles; meanwhile its policy row computes nothing."""
        assert self.batch_task is not None
        unit = self.schedule.next_for(self.batch_task, self.pool.tasks[i]) if self.refill else None
        if unit is not None and self.pool.tasks[i] == unit.task:
            starts[i] = unit
            return
        if unit is not None:
            self.pool.prepare_ahead(i, unit.task, (unit.index, unit.seed))
            self.warming[i] = unit
        else:
            self._build_ahead(i)
        if self.refill:
            cast(RowResettablePolicy, self.ctx.policy).reset_slots(task, {i: None})

    def _build_ahead(self, i: int) -> None:
        """Unmixed: idle sub-env `i` builds the next task's simulator while the batch finishes."""
        assert self.batch_task is not None
        upcoming = None if self.schedule.mixed else self.schedule.upcoming_task(self.batch_task)
        if upcoming is not None:
            self.pool.prepare_ahead(i, upcoming)
