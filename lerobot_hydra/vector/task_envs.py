"""Vector envs whose simulators live only inside their workers and whose workers outlive a task.

Each sub-env is a `SlotEnv`: a thin gym.Env with fixed spaces that holds no simulator until its first
reset. `bind()` points a slot at a task; the simulator for that task is created in the worker on the
next reset, and the previous task's simulator is closed first, so a process never holds two tasks'
simulators (or GL contexts). One set of workers serves every task of a lane in turn: the number of
live worker processes never exceeds the batch size, and no process is spawned per task.

A slot never resets itself. Once its episode has ended it stops simulating and answers steps with its
last observation until the next reset; a slot without an episode (the tail of a task's last batch) is
idle and never touches the simulator.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import multiprocessing
import os
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from lerobot_hydra.envs.base import EnvConfig, TaskEnv, TaskSpec
from lerobot_hydra.envs.build_errors import build_env
from lerobot_hydra.envs.protocol import EPISODES_KEY, INIT_STATE_KEY


def release_memory() -> None:
    """Collects a closed simulator's reference cycles and hands freed heap back to the OS, so that a worker
    serving task after task stays at one simulator's footprint instead of accumulating fragments."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: the memory is reused by the next simulator all the same


def zeros_like_space(space: gym.Space) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {key: zeros_like_space(sub) for key, sub in space.spaces.items()}
    return np.zeros(space.shape, dtype=space.dtype)


class SlotEnv(gym.Env):
    def __init__(
        self,
        slot: int,
        observation_space: gym.Space,
        action_space: gym.Space,
        metadata: dict[str, Any],
        render_threads: int | None = None,
    ) -> None:
        if render_threads is not None:
            # Mesa's llvmpipe (OSMesa) renders with one thread per core by default; N workers doing so would
            # oversubscribe the CPU. Read when the first GL context is created, i.e. after this.
            os.environ["LP_NUM_THREADS"] = str(render_threads)
        self.slot = slot
        self.observation_space = observation_space
        self.action_space = action_space
        self.metadata = metadata
        self.render_mode = "rgb_array"
        self._config: EnvConfig | None = None
        self._task: TaskSpec | None = None
        self._render = False
        self._env: TaskEnv | None = None
        self._idle_obs = zeros_like_space(observation_space)
        self._last_obs: Any = self._idle_obs
        self._active = False
        self._done = True
        self._steps = 0
        self._frame: np.ndarray | None = None

    def bind(self, config: EnvConfig, task: TaskSpec, render: bool) -> None:
        if (self._config, self._task, self._render) == (config, task, render):
            return
        self._close_sim()
        self._config, self._task, self._render = config, task, render
        self._active, self._done, self._last_obs = False, True, self._idle_obs

    def prepare(self, config: EnvConfig, task: TaskSpec, render: bool) -> None:
        """Binds to `task` and creates its simulator now instead of at the task's first reset (the previous
        task's simulator is closed first, as in `bind`)."""
        self.bind(config, task, render)
        if self._env is None:
            self._env = build_env(config, task, render)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        episode = (options or {}).get(EPISODES_KEY, [None] * (self.slot + 1))[self.slot]
        self._steps, self._frame = 0, None
        if episode is None:
            self._active, self._done, self._last_obs = False, True, self._idle_obs
            return self._idle_obs, {"is_success": False, "done": True, INIT_STATE_KEY: -1}
        if self._task is None or self._config is None:
            raise RuntimeError("SlotEnv.reset() called before bind()")
        episode_index, episode_seed = episode
        super().reset(seed=episode_seed)
        if self._env is None:
            self._env = build_env(self._config, self._task, self._render)
        obs, info = self._env.reset(seed=episode_seed, options={"episode_index": episode_index})
        self._active, self._done, self._last_obs = True, False, obs
        init_state = info.get(INIT_STATE_KEY)
        return obs, {"is_success": False, "done": False, INIT_STATE_KEY: -1 if init_state is None else int(init_state)}

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict]:
        # Termination is reported through info["done"], never through terminated/truncated, so the
        # vector env never auto-resets a slot mid-batch.
        self._frame = None
        if not self._active or self._done:
            return self._last_obs, 0.0, False, False, {"is_success": False, "done": True}
        assert self._env is not None and self._task is not None
        obs, reward, terminated, truncated, info = self._env.step(action)
        self._steps += 1
        self._done = bool(terminated or truncated or self._steps >= self._task.max_steps)
        self._last_obs = obs
        return obs, float(reward), False, False, {"is_success": bool(info.get("is_success", False)), "done": self._done}

    def render(self) -> np.ndarray | None:
        if self._frame is not None:
            frame, self._frame = self._frame, None
            return frame
        if self._env is None or not self._active:
            return None
        return self._env.render()

    def prerender(self) -> None:
        """Renders the current state now and keeps the frame for the next `render()`: a worker does this right
        after answering a step, so the frame is drawn while the parent runs the policy."""
        self._frame = None
        self._frame = self.render()

    def task_description(self) -> str:
        return self._task.description if self._task else ""

    def _close_sim(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
            release_memory()

    def close(self) -> None:
        self._close_sim()


def worker_context(config: EnvConfig) -> str:
    """forkserver keeps GL contexts and CUDA state of the parent out of the workers, and forks them quickly
    from a server that has imported the benchmark's modules once."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    preload = ["lerobot_hydra.vector.forkserver_preload", "lerobot_hydra.vector.task_envs", *config.worker_preload()]
    multiprocessing.set_forkserver_preload(preload)
    return "forkserver"


def prestart_workers(config: EnvConfig) -> None:
    """Start the forkserver now, so that its imports overlap the parent's (policy loading, torch)."""
    if worker_context(config) == "forkserver":
        from multiprocessing import forkserver

        from lerobot_hydra.vector.worker_signals import job_signals_blocked

        with job_signals_blocked():
            forkserver.ensure_running()


def stop_worker_servers() -> None:
    """Stops the forkserver and multiprocessing's resource tracker, if running, and waits for them: both otherwise
    outlive this process by up to a second (they exit when they notice its end). Call once every worker is closed;
    a later worker start brings them up again."""
    from multiprocessing import forkserver, resource_tracker

    gc.collect()  # frees the closed workers' shared memory, which the resource tracker would otherwise unlink itself
    for server in (forkserver._forkserver, resource_tracker._resource_tracker):
        stop = getattr(server, "_stop", None)  # private, present in CPython 3.8-3.13
        if stop is not None:
            stop()


def render_threads_per_worker(n_workers: int) -> int | None:
    """CPU rendering threads for each of `n_workers` workers; None when the user set LP_NUM_THREADS."""
    if "LP_NUM_THREADS" in os.environ:
        return None
    from lerobot_hydra.config.schema import available_cpus

    return max(1, available_cpus() // n_workers)


class EnvPool:
    """`n_envs` slots (in-process or in worker processes) that are re-bound from task to task."""

    def __init__(
        self,
        config: EnvConfig,
        n_envs: int,
        use_async: bool,
        spaces: tuple[gym.Space, gym.Space],
        render: bool,
    ) -> None:
        self.config = config.without_processors()
        self.render = render
        metadata = {"render_modes": ["rgb_array"], "render_fps": config.fps}
        from lerobot_hydra.vector.slot_vector import SlotVectorEnv

        workers = use_async and n_envs > 1
        threads = render_threads_per_worker(n_envs) if workers else None
        fns = [functools.partial(SlotEnv, i, *spaces, metadata, threads) for i in range(n_envs)]
        context = worker_context(config) if workers else None
        self.vec: gym.vector.VectorEnv = SlotVectorEnv(fns, *spaces, metadata, context=context)
        self._bound: TaskSpec | None = None

    def bind(self, task: TaskSpec) -> None:
        if self._bound != task:
            self.vec.call("bind", self.config, task, self.render)
            self._bound = task

    def prepare_ahead(self, slot: int, task: TaskSpec) -> None:
        """Has an idle worker slot build `task`'s simulator in the background (no-op for in-process slots),
        so that creating the next task's simulators overlaps the current task's last episodes."""
        self.vec.start_call(slot, "prepare", self.config, task, self.render)  # type: ignore[attr-defined]

    def close(self) -> None:
        self.vec.close()


class TaskVectorEnv(gym.vector.VectorWrapper):
    """The view of a pool that evaluates one task: resetting it binds the pool's slots to the task."""

    def __init__(self, pool: EnvPool, task: TaskSpec) -> None:
        super().__init__(pool.vec)
        self.pool = pool
        self.task = task

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        self.pool.bind(self.task)
        return self.env.reset(seed=seed, options=options)

    def prerender_after_steps(self, slots: Sequence[int]) -> None:
        """Until changed, the workers of `slots` render a frame right after each step, ready for `render_frames`."""
        self.env.prerender_slots = frozenset(slots)  # type: ignore[attr-defined]

    def render_frames(self, slots: Sequence[int]) -> tuple[np.ndarray | None, ...]:
        """A frame from each of `slots` (None where a slot has no episode); the other slots are not touched."""
        frames: list[np.ndarray | None] = [None] * self.num_envs
        for slot, frame in zip(slots, self.env.call_slots("render", slots), strict=True):  # type: ignore[attr-defined]
            frames[slot] = frame
        return tuple(frames)

    def prepare_ahead(self, slot: int, task: TaskSpec) -> None:
        """Starts building `task`'s simulator on `slot`, which this task no longer uses (see EnvPool)."""
        self.pool.prepare_ahead(slot, task)

    def close(self, **kwargs: Any) -> None:
        # Workers belong to the pool, which the caller closes once all its tasks are done.
        pass


def create_task_vector_envs(
    config: EnvConfig, tasks: list[TaskSpec], n_envs: int, use_async: bool, render: bool
) -> dict[str, dict[int, TaskVectorEnv]]:
    pools: dict[str, EnvPool] = {}
    out: dict[str, dict[int, TaskVectorEnv]] = {}
    for task in tasks:
        spaces = config.spaces(task)
        signature = repr(spaces)
        if signature not in pools:
            pools[signature] = EnvPool(config, n_envs, use_async, spaces, render)
        out.setdefault(task.group, {})[task.task_id] = TaskVectorEnv(pools[signature], task)
    return out


def close_task_vector_envs(envs: dict[str, dict[int, TaskVectorEnv]]) -> None:
    pools = {id(v.pool): v.pool for group in envs.values() for v in group.values()}
    for pool in pools.values():
        pool.close()
