"""Pools of sub-envs whose simulators live only inside their workers and whose workers outlive a task.

An `EnvPool` holds `n_envs` `SlotEnv`s (vector/slot_env.py), each bound to a task of its own: the slots of one
pool may run different tasks' episodes at once, each in its own worker (never two simulators in one process).
One pool serves every task of a lane whose spaces match: the number of live worker processes never exceeds the
batch size, and no process is spawned per task.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from lerobot_hydra.core.records import TaskKey
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.envs.protocol import EPISODES_KEY, RESET_MASK_KEY
from lerobot_hydra.vector.faults import SubEnvFailed
from lerobot_hydra.vector.slot_env import SlotEnv
from lerobot_hydra.vector.worker_servers import worker_context


def foreign_workers(config: EnvConfig, metadata: dict[str, Any], threads: int | None) -> Any:
    """The launcher of `config`'s workers in the interpreter `env.python` names, checked first."""
    from lerobot_hydra.vector.foreign import ForeignWorkers
    from lerobot_hydra.vector.interpreter import simulator_side, worker_server

    simulator_side(config)
    return ForeignWorkers(lambda: worker_server(config), metadata, threads, config.worker_preload())


def has_workers(config: EnvConfig, n_envs: int, use_async: bool) -> bool:
    """Whether a pool of `n_envs` sub-envs runs them in worker processes; simulators of another interpreter always
    run in its workers, one or more."""
    return (use_async and n_envs > 1) or config.python is not None


def render_threads_per_worker(n_workers: int) -> int | None:
    """CPU rendering threads for each of `n_workers` workers; None when the user set LP_NUM_THREADS."""
    if "LP_NUM_THREADS" in os.environ:
        return None
    from lerobot_hydra.schemas.schema import available_cpus

    return max(1, available_cpus() // n_workers)


class EnvPool:
    """`n_envs` slots (in-process or in worker processes), each bound to a task of its own and re-bound as the
    episodes it is given change task."""

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

        workers = has_workers(config, n_envs, use_async)
        threads = render_threads_per_worker(n_envs) if workers else None
        fns = [functools.partial(SlotEnv, i, *spaces, metadata, threads) for i in range(n_envs)]
        context = worker_context(config) if workers else None
        if context == "foreign":
            self.vec = SlotVectorEnv(fns, *spaces, metadata, context=foreign_workers(config, metadata, threads))
        else:
            self.vec = SlotVectorEnv(fns, *spaces, metadata, context=context)
        self.num_envs = n_envs
        self.tasks: list[TaskSpec | None] = [None] * n_envs  # the task each slot is bound to

    def watch(self, step_timeout_s: float) -> None:
        """The watchdog's limit on each call of the workers (eval.step_timeout_s): past it, a worker is killed."""
        self.vec.step_timeout_s = step_timeout_s

    @property
    def in_workers(self) -> bool:
        return self.vec.in_workers

    def reset(self, episodes: dict[int, tuple[TaskSpec, int, int]], every_slot: bool) -> tuple[Any, dict]:
        """Binds each slot of `episodes` (slot -> (task, episode index, seed)) to its task and resets it into its
        episode; with `every_slot` the other slots are reset to idle, else they keep running untouched. Returns
        the observation of every slot."""
        by_task: dict[TaskSpec, list[int]] = {}
        for slot, (task, _, _) in episodes.items():
            if self.tasks[slot] != task:
                by_task.setdefault(task, []).append(slot)
        for task, slots in by_task.items():
            self.vec.call_slots("bind", slots, self.config, task, self.render)
            for slot in slots:
                self.tasks[slot] = task
        entries = [episodes[i][1:] if i in episodes else None for i in range(self.num_envs)]
        options: dict[str, Any] = {EPISODES_KEY: entries}
        if not every_slot:
            options[RESET_MASK_KEY] = [i in episodes for i in range(self.num_envs)]
        return self.vec.reset(options=options)

    def prepare_ahead(self, slot: int, task: TaskSpec, episode: tuple[int, int] | None = None) -> None:
        """Has an idle worker slot build `task`'s simulator in the background (no-op for in-process slots), and
        reset it into `episode` (index, seed) when the slot's next episode is known: the slot is not stepped until
        `ready` reports it done, and the `reset` that starts that episode is then a round trip."""
        if self.tasks[slot] == task:
            return
        if self.vec.start_call(slot, "prepare", self.config, task, self.render, episode):
            self.tasks[slot] = task

    def ready(self, slots: Sequence[int], wait: bool = False) -> list[int]:
        """Those of `slots` that no background build keeps busy; with `wait`, blocks until there is one."""
        return self.vec.finished_calls(slots, wait)

    def replace(self, slots: Sequence[int]) -> None:
        """Fresh workers for `slots` (whose workers were lost, or whose simulators failed), bound to no task until
        their next episode; in-process slots close their simulators, built afresh at their next reset."""
        if not self.in_workers:
            with contextlib.suppress(SubEnvFailed):  # a broken simulator may fail to close too: it is dropped anyway
                self.vec.call_slots("close", slots)
            return
        self.vec.replace_workers(slots)
        for slot in slots:
            self.tasks[slot] = None

    def prerender_after_steps(self, slots: Sequence[int]) -> None:
        """Until changed, the sub-envs of `slots` run filmed episodes: they draw the video's frame at each step, and
        workers render it right after answering the step, ready for `render_frames`."""
        self.vec.prerender_slots = frozenset(slots)

    def blind_steps(self, slots: Sequence[int]) -> None:
        """The next step of the sub-envs `slots` returns an observation nobody reads: those whose simulator draws
        on demand leave its cameras undrawn."""
        self.vec.blind_slots = frozenset(slots)

    def render_frames(self, slots: Sequence[int]) -> dict[int, np.ndarray | None]:
        """A frame from each of `slots` (None where a slot has no episode); the other slots are not touched."""
        return dict(zip(slots, self.vec.call_slots("render", slots), strict=True))

    def close(self) -> None:
        self.vec.close()


def create_pools(
    config: EnvConfig, tasks: list[TaskSpec], n_envs: int, use_async: bool, render: bool
) -> dict[TaskKey, EnvPool]:
    """A pool per distinct (observation, action) spaces, by task key: tasks whose spaces match share one."""
    pools: dict[str, EnvPool] = {}
    out: dict[TaskKey, EnvPool] = {}
    for task in tasks:
        spaces = config.spaces(task)
        signature = repr(spaces)
        if signature not in pools:
            pools[signature] = EnvPool(config, n_envs, use_async, spaces, render)
        out[task.key] = pools[signature]
    return out


def close_pools(pools: dict[TaskKey, EnvPool]) -> None:
    for pool in {id(p): p for p in pools.values()}.values():
        pool.close()
