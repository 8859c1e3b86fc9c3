"""Rollout: a task's episodes in batches through its vector env, producing one record per episode.

Per step: raw observation -> env pre -> policy (with its own pre/post) -> env post -> vector env step.
Episode k of a task is seeded with `seed + k` whatever the batch, lane or shard it runs in; success
counts up to and including the step that ended the episode, and a finished sub-env is never stepped
again before the batch ends. A filmed episode (see video.py) gets the frame after reset and one after each
of its steps, rendered only by the sub-envs whose episode is filmed.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.envs.vector import EPISODES_KEY, INIT_STATE_KEY, TaskVectorEnv, close_task_vector_envs
from lerobot_hydra.policies.base import Policy
from lerobot_hydra.processors.observation import RAW_KEY
from lerobot_hydra.processors.pipeline import Pipeline
from lerobot_hydra.progress import Progress
from lerobot_hydra.records import EpisodeRecord
from lerobot_hydra.sharding import episode_seed
from lerobot_hydra.video import EpisodeVideo, VideoRecorder

OnRecord = Callable[[EpisodeRecord], None]
log = logging.getLogger("lerobot_hydra")
_NO_FRAME_WARNED: set[str] = set()


@dataclass
class TaskWork:
    task: TaskSpec
    episodes: list[int]  # episode indices still to run, ascending
    done: int = 0  # episodes of this task already recorded (resume)
    successes: int = 0


@dataclass
class RolloutContext:
    policy: Policy
    env_pre: Pipeline
    env_post: Pipeline
    base_seed: int
    on_record: OnRecord
    videos: VideoRecorder | None = None


def run_task(vec: TaskVectorEnv, work: TaskWork, ctx: RolloutContext, progress: Progress) -> None:
    task, n = work.task, vec.num_envs
    bar = progress.start(task, total=work.done + len(work.episodes), done=work.done, successes=work.successes)
    try:
        for start in range(0, len(work.episodes), n):
            chunk = work.episodes[start : start + n]
            slots = [(k, episode_seed(ctx.base_seed, k)) for k in chunk] + [None] * (n - len(chunk))
            for record in run_batch(vec, task, slots, ctx):
                ctx.on_record(record)
                bar.update(record)
    finally:
        progress.finish(bar)


def run_batch(
    vec: TaskVectorEnv, task: TaskSpec, slots: list[tuple[int, int] | None], ctx: RolloutContext
) -> list[EpisodeRecord]:
    videos = _start_videos(ctx.videos, task, slots)
    try:
        return _roll_out(vec, task, slots, ctx, videos)
    finally:
        for video in videos.values():
            video.abort()


def _roll_out(
    vec: TaskVectorEnv,
    task: TaskSpec,
    slots: list[tuple[int, int] | None],
    ctx: RolloutContext,
    videos: dict[int, EpisodeVideo],
) -> list[EpisodeRecord]:
    n = len(slots)
    obs, reset_info = vec.reset(options={EPISODES_KEY: slots})
    _capture_frames(vec, videos, list(videos))
    init_states = np.asarray(reset_info.get(INIT_STATE_KEY, np.full(n, -1)))
    ctx.policy.reset(task, [s[1] if s else None for s in slots])
    done = np.array([s is None for s in slots])
    sum_reward = np.zeros(n)
    max_reward = np.full(n, -np.inf)
    success = np.zeros(n, dtype=bool)
    steps = np.zeros(n, dtype=int)
    started = time.perf_counter()
    records: list[EpisodeRecord] = []
    descriptions = [task.description] * n
    while not done.all():
        batch = ctx.env_pre({RAW_KEY: obs, "task": list(descriptions)})
        action = ctx.env_post({"action": ctx.policy.select_action(batch)})["action"]
        obs, reward, _, _, info = vec.step(_as_actions(action, n, vec.single_action_space.dtype))
        active = ~done
        _capture_frames(vec, videos, list(videos))  # the slots whose episode ran this step
        sum_reward[active] += reward[active]
        max_reward[active] = np.maximum(max_reward[active], reward[active])
        steps[active] += 1
        success[active] |= np.asarray(info["is_success"], dtype=bool)[active]
        finished = active & np.asarray(info["done"], dtype=bool)
        for i in np.flatnonzero(finished):
            k, seed = slots[i]  # type: ignore[misc]
            records.append(
                EpisodeRecord(
                    task_group=task.group,
                    task_id=task.task_id,
                    task_name=task.name,
                    task=task.description,
                    episode_index=k,
                    seed=seed,
                    success=bool(success[i]),
                    sum_reward=float(sum_reward[i]),
                    max_reward=float(max_reward[i]),
                    steps=int(steps[i]),
                    wall_s=round(time.perf_counter() - started, 4),
                    init_state_id=None if init_states[i] < 0 else int(init_states[i]),
                    video_path=videos.pop(i).finish() if i in videos else None,
                )
            )
        done |= finished
    return records


def _start_videos(
    recorder: VideoRecorder | None, task: TaskSpec, slots: list[tuple[int, int] | None]
) -> dict[int, EpisodeVideo]:
    """Videos of this batch's slots whose episode is to be filmed, by slot."""
    if recorder is None:
        return {}
    return {i: recorder.start(task, slot[0]) for i, slot in enumerate(slots) if slot and recorder.wants(slot[0])}


def _capture_frames(vec: TaskVectorEnv, videos: dict[int, EpisodeVideo], wanted: list[int]) -> None:
    """Renders only the slots in `wanted`; a slot that yields no frame loses its video."""
    if not wanted:
        return
    frames = vec.render_frames(wanted)
    for i in wanted:
        if frames[i] is None:
            _warn_no_frames(vec.task)
            videos.pop(i).abort()
        else:
            videos[i].add(frames[i])


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


def evaluate(
    env_cfg: EnvConfig,
    work: list[TaskWork],
    policy: Policy,
    env_pre: Pipeline,
    env_post: Pipeline,
    base_seed: int,
    batch_size: int,
    use_async: bool,
    max_parallel_tasks: int,
    on_record: OnRecord,
    progress: Progress,
    render: bool = False,
    videos: VideoRecorder | None = None,
) -> None:
    """Run every task's remaining episodes, `max_parallel_tasks` tasks at a time, each lane with its own
    workers and its own policy state."""
    work = [w for w in work if w.episodes]
    if not work:
        return
    n_envs = min(batch_size, max(len(w.episodes) for w in work))
    n_lanes = min(max_parallel_tasks, len(work))
    lock = threading.Lock()

    def locked_record(record: EpisodeRecord) -> None:
        with lock:
            on_record(record)

    def run_lane(lane_work: list[TaskWork], lane_policy: Policy) -> None:
        envs = env_cfg.create_envs(n_envs, use_async, tasks=[w.task for w in lane_work], render=render)
        ctx = RolloutContext(lane_policy, env_pre, env_post, base_seed, locked_record, videos)
        try:
            for w in lane_work:
                run_task(envs[w.task.group][w.task.task_id], w, ctx, progress)
        finally:
            close_task_vector_envs(envs)

    if n_lanes == 1:
        run_lane(work, policy)
        return
    with cf.ThreadPoolExecutor(max_workers=n_lanes, thread_name_prefix="lane") as pool:
        futures = [pool.submit(run_lane, work[i::n_lanes], policy.fork()) for i in range(n_lanes)]
        for future in cf.as_completed(futures):
            future.result()
