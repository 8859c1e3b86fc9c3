"""A lean vector env for `SlotEnv`s: in this process, or one slot per worker process.

Workers exchange observations, actions, rewards and flags through shared memory; a step costs one byte each way
per worker (Gymnasium's AsyncVectorEnv pickles every step's results and info dicts, ~0.3 ms a step: as much as a
MetaWorld step). Everything else (reset with per-slot options, bind, render, close) goes as pickled calls (JSON
to a worker of another interpreter: vector/foreign.py).
A sub-env that raises is reported with its message and traceback (`SubEnvFailed`); a worker that dies, or does not
answer a call within `eval.step_timeout_s` (then it is killed), is reported as `WorkerLost` once the other workers'
answers are collected, and `replace_workers` starts a fresh one in its place (vector/faults.py).
"""

from __future__ import annotations

import multiprocessing.connection
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space, create_empty_array, read_from_shared_memory

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.protocol import RESET_MASK_KEY
from lerobot_hydra.vector import faults
from lerobot_hydra.vector.faults import SubEnvFailed, WorkerLost, call_in_process, describe_exit, last_line
from lerobot_hydra.vector.launchers import ForkserverWorkers, WorkerLauncher
from lerobot_hydra.vector.slot_worker import (
    DONE,
    RESULT_FIELDS,
    copy_tree,
    row,
    step_message,
    write_row,
)
from lerobot_hydra.vector.worker_signals import OPEN_WORKERS, job_signals_blocked

RESET_INFO_KEYS = ("is_success", "done", "init_state_id")


class SlotVectorEnv(gym.vector.VectorEnv):
    def __init__(
        self,
        slot_fns: Sequence[Callable[[], gym.Env]],
        observation_space: gym.Space,
        action_space: gym.Space,
        metadata: dict[str, Any],
        context: str | WorkerLauncher | None = None,
    ) -> None:
        """`context` None: the slots live in this process; else the multiprocessing start method of the workers,
        or a launcher of workers from another interpreter (vector/foreign.py)."""
        self.num_envs = len(slot_fns)
        self.metadata = metadata
        self.render_mode = "rgb_array"
        self.single_observation_space = observation_space
        self.single_action_space = action_space
        self.observation_space = batch_space(observation_space, self.num_envs)
        self.action_space = batch_space(action_space, self.num_envs)
        # Sub-envs whose workers render a frame after each step (in-process sub-envs render when asked).
        self.prerender_slots: frozenset[int] = frozenset()
        # Sub-envs whose next step's observation nobody reads: they leave their cameras undrawn (`DrawsOnDemand`).
        self.blind_slots: frozenset[int] = frozenset()
        self._parked: dict[int, str] = {}  # workers busy with a started call (`start_call`), skipped by step()
        self.step_timeout_s = faults.WorkerFaults.step_timeout_s  # the watchdog's limit (its pool sets the run's)
        self._envs: list[gym.Env] = []
        self._conns: list[Any] = []
        self._processes: list[Any] = []
        self._slot_fns = list(slot_fns)
        if context is None:
            self._envs = [fn() for fn in slot_fns]
            self._obs = create_empty_array(observation_space, self.num_envs, fn=np.zeros)
            self._results = {name: np.zeros(self.num_envs, dtype) for name, dtype in RESULT_FIELDS}
            return
        self._launcher = ForkserverWorkers(context) if isinstance(context, str) else context
        self._codec = self._launcher.codec
        self._buffers = self._launcher.buffers((observation_space, action_space), self.num_envs)
        self._obs_shm, self._act_shm, self._res_shm = self._buffers
        self._obs = read_from_shared_memory(observation_space, self._obs_shm, self.num_envs)
        self._actions = read_from_shared_memory(action_space, self._act_shm, self.num_envs)
        self._results = {name: np.frombuffer(self._res_shm[name], dtype) for name, dtype in RESULT_FIELDS}
        self._conns, self._processes = [None] * self.num_envs, [None] * self.num_envs
        for index in range(self.num_envs):
            self._start_worker(index)
        self._gather("__init__", list(range(self.num_envs)))

    def _start_worker(self, index: int) -> None:
        spaces = (self.single_observation_space, self.single_action_space)
        with job_signals_blocked():  # a foreign worker ignores them once its interpreter is up
            conn, process = self._launcher.start(index, self._slot_fns[index], spaces, self._buffers)
        OPEN_WORKERS.add(process)
        self._conns[index], self._processes[index] = conn, process

    def replace_workers(self, indices: Sequence[int]) -> None:
        """Fresh workers for the sub-envs `indices` (their old ones killed if still running): each starts with an
        unbound sub-env, as at construction."""
        for index in indices:
            self._parked.pop(index, None)
            process = self._processes[index]
            if process.is_alive():
                process.kill()
            process.join(timeout=10)
            OPEN_WORKERS.discard(process)
            self._conns[index].close()
            self._start_worker(index)
        self._gather("__init__", list(indices))

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Resets every sub-env, or with `options["reset_mask"]` only those marked; the others keep their state
        and their current observation. Info of sub-envs not reset holds defaults (-1, False)."""
        options = dict(options or {})
        mask = options.pop(RESET_MASK_KEY, None)
        indices = [i for i in range(self.num_envs) if mask is None or mask[i]]
        kwargs = {"seed": seed, "options": options}
        results = self._call_each("reset", [((), kwargs)] * len(indices), True, indices)
        infos = dict(zip(indices, results, strict=True))
        info = {
            key: np.array(
                [infos.get(i, {}).get(key, -1 if key == "init_state_id" else False) for i in range(self.num_envs)]
            )
            for key in RESET_INFO_KEYS
        }
        return self._observation(), info

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._conns:
            copy_tree(self._actions, actions)
            stepped = [i for i in range(self.num_envs) if i not in self._parked]
            lost: dict[int, str] = {}
            film, blind = self.prerender_slots, self.blind_slots
            for index in stepped:
                try:
                    self._conns[index].send_bytes(step_message(index in film, index in blind))
                except OSError:
                    lost[index] = self._why_lost(index)
            for index in self._parked:
                self._results["reward"][index], self._results["done"][index] = 0.0, True
                self._results["is_success"][index] = False
            replies = self._receive_all([i for i in stepped if i not in lost], lost)
            self._raise_failures(
                "step", {i: self._codec.decode_reply(r) for i, r in replies.items() if r != DONE}, lost
            )
        else:
            for index, env in enumerate(self._envs):
                film, blind = index in self.prerender_slots, index in self.blind_slots  # in process: no prerender
                call_in_process(index, "step", env.draw_next, observation=not blind, film=film)
                obs, reward, _, _, info = call_in_process(index, "step", env.step, row(actions, index))
                write_row(self.single_observation_space, self._obs, index, obs)
                self._results["reward"][index] = reward
                self._results["done"][index] = info["done"]
                self._results["is_success"][index] = info["is_success"]
        no = np.zeros(self.num_envs, dtype=np.bool_)
        info = {"is_success": self._results["is_success"].copy(), "done": self._results["done"].copy()}
        return self._observation(), self._results["reward"].copy(), no, no.copy(), info

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return tuple(self._call_each(name, [(args, kwargs)] * self.num_envs))

    def call_slots(self, name: str, indices: Sequence[int], *args: Any) -> list[Any]:
        """Calls `name` on the sub-envs `indices` only; the others are not disturbed."""
        return self._call_each(name, [(args, {})] * len(indices), indices=list(indices))

    def start_call(self, index: int, name: str, *args: Any) -> bool:
        """Starts `name` on worker `index` without waiting: until its answer is collected (by the next call
        that involves the sub-env) the sub-env is parked and not stepped. In-process sub-envs, or a sub-env
        already busy with a started call: nothing. Returns whether it started."""
        if not self._conns or index in self._parked:
            return False
        try:
            self._conns[index].send_bytes(self._codec.encode_call(name, args, {}, False))
        except OSError:
            pass  # a dead worker: its call is collected as lost
        self._parked[index] = name
        return True

    @property
    def in_workers(self) -> bool:
        """Whether the sub-envs live in worker processes (one each) rather than in this process."""
        return bool(self._conns)

    def finished_calls(self, indices: Sequence[int], wait: bool = False) -> list[int]:
        """Those of `indices` whose started call has answered (or that have none), without collecting the
        answers; with `wait`, blocks until at least one has."""
        busy = [self._conns[i] for i in indices if i in self._parked]
        if wait and busy and len(busy) == len(indices):
            timeout = self.step_timeout_s
            if not multiprocessing.connection.wait(busy, timeout):
                wedged = [i for i in indices if i in self._parked]
                for index in wedged:
                    self._processes[index].kill()
                    self._parked.pop(index)
                raise WorkerLost({i: describe_exit(None, timeout) for i in wedged})
        return [i for i in indices if i not in self._parked or self._conns[i].poll()]

    def close_extras(self, **kwargs: Any) -> None:
        if not self._conns:
            for env in self._envs:
                env.close()
            return
        # A worker still busy with a started call (building a simulator nobody will use) is stopped, not awaited.
        for index in self._parked:
            self._processes[index].kill()
        for index, conn in enumerate(self._conns):
            if index not in self._parked:
                try:
                    conn.send_bytes(self._codec.encode_call("close", (), {}, False))
                except OSError:
                    pass
        for process, conn in zip(self._processes, self._conns, strict=True):
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join(timeout=10)
            OPEN_WORKERS.discard(process)
            conn.close()
        self._parked.clear()
        self._conns, self._processes = [], []
        self._launcher.close()

    def _call_each(
        self, name: str, calls: list[tuple[tuple, dict]], write_obs: bool = False, indices: list[int] | None = None
    ) -> list[Any]:
        """Calls `name` on the sub-envs `indices` (default: all), the i-th with `calls[i]`'s arguments."""
        indices = list(range(self.num_envs)) if indices is None else indices
        if not self._conns:
            out = []
            for index, (args, kwargs) in zip(indices, calls, strict=True):
                result = call_in_process(index, name, getattr(self._envs[index], name), *args, **kwargs)
                if write_obs:
                    obs, result = result
                    write_row(self.single_observation_space, self._obs, index, obs)
                out.append(result)
            return out
        self._collect_started([i for i in indices if i in self._parked])
        lost: dict[int, str] = {}
        for index, (args, kwargs) in zip(indices, calls, strict=True):
            try:
                self._conns[index].send_bytes(self._codec.encode_call(name, args, kwargs, write_obs))
            except OSError:
                lost[index] = self._why_lost(index)
        return self._gather(name, indices, lost)

    def _collect_started(self, indices: list[int]) -> None:
        """Waits for the answers of the calls started on `indices` and unparks them; raises their errors."""
        for index in indices:
            self._gather(self._parked.pop(index), [index])

    def _gather(self, name: str, indices: list[int], lost: dict[int, str] | None = None) -> list[Any]:
        lost = {} if lost is None else lost
        replies = {
            i: self._codec.decode_reply(r)
            for i, r in self._receive_all([i for i in indices if i not in lost], lost).items()
        }
        self._raise_failures(name, {i: reply for i, reply in replies.items() if not reply[0]}, lost)
        return [replies[i][1] for i in indices]

    def _receive_all(self, indices: list[int], lost: dict[int, str]) -> dict[int, Any]:
        """The answers of `indices`; the workers found lost meanwhile are added to `lost` instead."""
        replies = {}
        for index in indices:
            try:
                replies[index] = self._receive(index)
            except WorkerLost as err:
                lost.update(err.lost)
        return replies

    def _raise_failures(self, name: str, failed: dict[int, Any], lost: dict[int, str]) -> None:
        """Raises for the lost workers, else for the first failed sub-env: a UserError (a setting) as it is, else
        `SubEnvFailed`."""
        if lost:
            raise WorkerLost(lost)
        for index, (_, failure) in failed.items():
            if isinstance(failure, UserError):
                raise failure
            raise SubEnvFailed(index, name, last_line(failure), failure)

    def _receive(self, index: int) -> bytes:
        """The next answer of worker `index`; `WorkerLost` when it died or gives none within the watchdog's
        limit (then it is killed)."""
        conn, timeout = self._conns[index], self.step_timeout_s
        try:
            if not conn.poll(timeout):
                self._processes[index].kill()
                self._processes[index].join(timeout=10)
                raise WorkerLost({index: describe_exit(None, timeout)})
            return conn.recv_bytes()
        except (EOFError, OSError) as err:
            raise WorkerLost({index: self._why_lost(index)}) from err

    def _why_lost(self, index: int) -> str:
        process = self._processes[index]
        process.join(timeout=10)  # its pipe closes a moment before its exit code is known
        return describe_exit(process.exitcode)

    def _observation(self) -> Any:
        # A copy: policies may keep observations (history queues) while the buffers are overwritten.
        return copy_tree(None, self._obs)
