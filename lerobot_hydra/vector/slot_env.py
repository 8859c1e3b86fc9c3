"""A sub-env that holds no simulator until it is used, and is re-pointed from task to task inside its worker.

A `SlotEnv` is a thin gym.Env with fixed spaces. `bind()` points it at a task; the simulator for that task is
created in the worker on the next reset (or at once by `prepare()`), and the previous task's simulator is closed
first, so a process never holds two tasks' simulators (or GL contexts).

A slot never resets itself. Once its episode has ended it stops simulating and answers steps with its last
observation until the next reset; a slot without an episode is idle and never touches the simulator.
"""

from __future__ import annotations

import ctypes
import gc
import os
from typing import Any

import gymnasium as gym
import numpy as np

from lerobot_hydra.envs.base import EnvConfig, TaskEnv, TaskSpec, draws_on_demand
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
        # An episode's reset done ahead by `prepare`: (episode index, seed) -> what the env's reset returned, or
        # the exception it raised (raised again by the `reset` that starts the episode, under that call's name).
        self._reset_ahead: tuple[tuple[int, int], tuple[Any, dict] | Exception] | None = None

    def bind(self, config: EnvConfig, task: TaskSpec, render: bool) -> None:
        if (self._config, self._task, self._render) == (config, task, render):
            return
        self._close_sim()
        self._config, self._task, self._render = config, task, render
        self._active, self._done, self._last_obs = False, True, self._idle_obs

    def prepare(self, config: EnvConfig, task: TaskSpec, render: bool, episode: tuple[int, int] | None = None) -> None:
        """Binds to `task` and creates its simulator now instead of at the task's first reset (the previous
        task's simulator is closed first, as in `bind`). With `episode` (index, seed), the simulator is also reset
        into that episode now, and the `reset` that starts it returns what this one did: a reset is a function of
        the task, seed and episode index alone, so doing it early changes nothing but when its cost is paid."""
        self.bind(config, task, render)
        if self._env is None:
            self._env = build_env(config, task, render)
        if episode is not None:
            index, seed = episode
            try:
                self._reset_ahead = (episode, self._env.reset(seed=seed, options={"episode_index": index}))
            except Exception as err:  # noqa: BLE001 - a simulator's own error, reported by the episode's reset
                self._reset_ahead = (episode, err)

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
        ahead, self._reset_ahead = self._reset_ahead, None
        if ahead is not None and ahead[0] == (episode_index, episode_seed):
            if isinstance(ahead[1], Exception):
                raise ahead[1]
            obs, info = ahead[1]
        else:
            obs, info = self._env.reset(seed=episode_seed, options={"episode_index": episode_index})
        self._active, self._done, self._last_obs = True, False, obs
        init_state = info.get(INIT_STATE_KEY)
        return obs, {"is_success": False, "done": False, INIT_STATE_KEY: -1 if init_state is None else int(init_state)}

    def draw_next(self, observation: bool, film: bool) -> None:
        """What the next step draws (`DrawsOnDemand.draw_next`), told to a simulator that draws on demand; any
        other simulator draws everything."""
        if self._env is not None and self._active and not self._done and draws_on_demand(self._env):
            self._env.draw_next(observation, film)  # type: ignore[attr-defined]

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

    def _close_sim(self, release: bool = True) -> None:
        self._reset_ahead = None
        env, self._env = self._env, None  # dropped even when its close raises (a simulator that failed)
        if env is not None:
            env.close()
            if release:
                release_memory()

    def close(self) -> None:
        # The sub-env's end: no next simulator to make room for, so no full collection (in the main process, an
        # in-process sub-env's, it searches torch's and LeRobot's half a million objects: a second or more).
        self._close_sim(release=False)
