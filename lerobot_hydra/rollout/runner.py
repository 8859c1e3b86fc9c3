"""Rollout: a task's episodes in batches through its vector env, producing one record per episode.

Per step: raw observation -> env pre -> policy (with its own pre/post) -> env post -> vector env step.
Episode k of a task is seeded with `seed + k` whatever the batch, sub-env, lane or shard it runs in;
success counts up to and including the step that ended the episode, and a finished sub-env is never
stepped again: it starts the next pending episode at once when the policy can reset one sub-env's state,
else it idles until every episode of its batch has ended. A filmed episode (see rollout/filming.py) gets the frame
after reset and one after each of its steps, rendered only by the sub-envs whose episode is filmed; worker
sub-envs draw it right after answering the step, while this process runs the policy for the next one.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.envs.build_errors import env_label
from lerobot_hydra.envs.protocol import EPISODES_KEY, INIT_STATE_KEY, RESET_MASK_KEY
from lerobot_hydra.policies.base import Policy, RowResettablePolicy, resets_rows
from lerobot_hydra.processors.observation import RAW_KEY
from lerobot_hydra.processors.pipeline import Pipeline
from lerobot_hydra.rollout.filming import FilmedEpisode, Filming
from lerobot_hydra.rollout.plan import episode_seed
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.vector.task_envs import TaskVectorEnv

OnRecord = Callable[[EpisodeRecord], None]
log = logging.getLogger("lerobot_hydra")
_NO_FRAME_WARNED: set[str] = set()


@dataclass
class TaskWork:
    task: TaskSpec
    episodes: list[int]  # episode indices still to run, ascending
    done: int = 0  # episodes of this task already recorded (resume)
    successes: int = 0


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


def run_task(
    vec: TaskVectorEnv, work: TaskWork, ctx: RolloutContext, progress: Progress, next_task: TaskSpec | None = None
) -> None:
    """`next_task`: the task this vector env runs next, whose simulators sub-envs left idle by this task's
    last episodes start building meanwhile."""
    bar = progress.start(work.task, total=work.done + len(work.episodes), done=work.done, successes=work.successes)
    pending = deque((k, episode_seed(ctx.base_seed, k)) for k in work.episodes)

    def emit(record: EpisodeRecord) -> None:
        ctx.on_record(record)
        bar.update(record)

    try:
        while pending:
            _run_batch(vec, work.task, pending, ctx, emit, next_task)
    finally:
        progress.finish(bar)


@dataclass
class _Episode:
    """The running episode of one sub-env."""

    index: int
    seed: int
    init_state: int | None
    started: float
    video: FilmedEpisode | None
    sum_reward: float = 0.0
    max_reward: float = -np.inf
    success: bool = False
    steps: int = 0


def _run_batch(
    vec: TaskVectorEnv,
    task: TaskSpec,
    pending: deque[tuple[int, int]],
    ctx: RolloutContext,
    emit: OnRecord,
    next_task: TaskSpec | None,
) -> None:
    """Episodes from `pending` on every sub-env until none is running, each record emitted (and so flushed to
    disk) the moment its episode ends.

    A policy that can reset one sub-env's state (`reset_slots`) gets the next pending episode on a sub-env as
    soon as its episode ends; other policies (LeRobot families whose queues span the batch) start a new batch
    once every episode of this one has ended, the finished sub-envs idling meanwhile. Once no episode of the task
    is pending, a sub-env without one starts building `next_task`'s simulator (in its worker).
    """
    n = vec.num_envs
    refill = resets_rows(ctx.policy)
    running: list[_Episode | None] = [None] * n
    try:
        starts = {i: pending.popleft() for i in range(n) if pending}
        obs = _start(vec, task, running, starts, ctx, first=True)
        if next_task is not None and not pending:
            for i in range(n):
                if running[i] is None:
                    vec.prepare_ahead(i, next_task)
        owed: set[int] = set()  # filmed sub-envs whose frame of the last step is still to be collected
        while any(running):
            if ctx.stop is not None and ctx.stop.is_set():
                raise LaneStopped
            batch = ctx.env_pre({RAW_KEY: obs, "task": [task.description] * n})
            action = ctx.env_post({"action": ctx.policy.select_action(batch)})["action"]
            _capture_frames(vec, running, only=owed)
            filmed = {i for i, e in enumerate(running) if e is not None and e.video is not None}
            vec.prerender_after_steps(sorted(filmed))
            obs, reward, _, _, info = vec.step(_as_actions(action, n, vec.single_action_space.dtype))
            finished = {i for i, e in enumerate(running) if e is not None and info["done"][i]}
            _capture_frames(vec, running, only=filmed & finished)
            owed = filmed - finished
            ended = {}
            for i, episode in enumerate(running):
                if episode is None:
                    continue
                step_reward = _finite_reward(float(reward[i]), vec, task, episode)
                episode.sum_reward += step_reward
                episode.max_reward = max(episode.max_reward, step_reward)
                episode.steps += 1
                episode.success |= bool(info["is_success"][i])
                if info["done"][i]:
                    running[i] = None
                    emit(_record(task, episode))
                    if refill and pending:
                        ended[i] = pending.popleft()
                    elif next_task is not None and not pending:
                        vec.prepare_ahead(i, next_task)
            if ended:
                obs = _start(vec, task, running, ended, ctx, first=False)
    finally:
        vec.prerender_after_steps([])
        for episode in running:
            if episode is not None and episode.video is not None:
                episode.video.abort()


def _start(
    vec: TaskVectorEnv,
    task: TaskSpec,
    running: list[_Episode | None],
    starts: dict[int, tuple[int, int]],
    ctx: RolloutContext,
    first: bool,
) -> Any:
    """Resets the sub-envs in `starts` (slot -> (episode index, seed)) into their episodes; the others, when
    not `first`, keep running untouched. Returns the observation of every sub-env."""
    slots = [starts.get(i) for i in range(vec.num_envs)]
    options: dict[str, Any] = {EPISODES_KEY: slots}
    if not first:
        options[RESET_MASK_KEY] = [slot is not None for slot in slots]
    obs, info = vec.reset(options=options)
    seeds = {i: seed for i, (_, seed) in starts.items()}
    if first:
        ctx.policy.reset(task, [seeds.get(i) for i in range(vec.num_envs)])
    else:
        cast(RowResettablePolicy, ctx.policy).reset_slots(task, seeds)
    now = time.perf_counter()
    for i, (k, seed) in starts.items():
        init_state = int(info[INIT_STATE_KEY][i])
        video = ctx.videos.start(task, k) if ctx.videos is not None and ctx.videos.wants(k) else None
        running[i] = _Episode(k, seed, None if init_state < 0 else init_state, now, video)
    _capture_frames(vec, running, only=set(starts))
    return obs


def _finite_reward(value: float, vec: TaskVectorEnv, task: TaskSpec, episode: _Episode) -> float:
    """`value`, or a UserError for a NaN or infinite reward: the env is broken and its results would mean nothing
    (the episodes already recorded stay on disk)."""
    if math.isfinite(value):
        return value
    raise UserError(
        f"the env {env_label(vec.pool.config)} returned a reward of {value} at step {episode.steps + 1} of episode "
        f"{episode.index} of task {task.group}/{task.task_id} {task.name}: a broken env, whose results would be "
        "meaningless; fix the env"
    )


def _record(task: TaskSpec, episode: _Episode) -> EpisodeRecord:
    return EpisodeRecord(
        task_group=task.group,
        task_id=task.task_id,
        task_name=task.name,
        task=task.description,
        episode_index=episode.index,
        seed=episode.seed,
        success=episode.success,
        sum_reward=episode.sum_reward,
        max_reward=episode.max_reward,
        steps=episode.steps,
        wall_s=round(time.perf_counter() - episode.started, 4),
        init_state_id=episode.init_state,
        video_path=episode.video.finish() if episode.video is not None else None,
    )


def _capture_frames(vec: TaskVectorEnv, running: list[_Episode | None], only: set[int] | None = None) -> None:
    """Renders only the sub-envs whose running episode is filmed; one that yields no frame loses its video."""
    wanted = [i for i, e in enumerate(running) if e is not None and e.video is not None and (only is None or i in only)]
    if not wanted:
        return
    frames = vec.render_frames(wanted)
    for i in wanted:
        episode = running[i]
        assert episode is not None and episode.video is not None
        if frames[i] is None:
            _warn_no_frames(vec.task)
            episode.video.abort()
            episode.video = None
        else:
            episode.video.add(frames[i])


def _warn_no_frames(task: TaskSpec) -> None:
    if task.group not in _NO_FRAME_WARNED:
        _NO_FRAME_WARNED.add(task.group)
        log.warning("%s: the env's render() returned no frame, so its episodes get no video", task.label)


def _as_actions(action: Any, n: int, dtype: Any) -> np.ndarray:
    if hasattr(action, "detach"):
        action = action.detach().to("cpu").numpy()
    action = np.asarray(action, dtype=dtype)
    if action.shape[:1] != (n,):
        raise ValueError(f"the policy returned actions of shape {action.shape}; expected a batch of {n}")
    return action
