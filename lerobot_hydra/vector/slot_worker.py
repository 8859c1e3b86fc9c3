"""The loop of a `SlotVectorEnv` worker process, and the helpers both sides use to read and write batch rows.

A step is one byte each way (`step_message`: whether the step's observation is read, so its cameras are drawn, and
whether the episode is filmed, so a frame is rendered once the step is answered); the step's observation and
results go through shared memory. Every other call arrives pickled, with its answer pickled back (a foreign
worker's, started from another interpreter: as JSON, vector/wire.py).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import read_from_shared_memory, write_to_shared_memory

from lerobot_hydra.core.errors import worker_failure
from lerobot_hydra.vector.worker_signals import ignore_job_signals

# One byte each way per step: STEP with the flags FILM (the episode is filmed: its frame is drawn, and rendered once
# the step is answered) and BLIND (nobody reads the step's observation: its cameras are not drawn). A call's message
# is never one byte long.
STEP, FILM, BLIND, DONE = 0x40, 0x01, 0x02, b"k"
# Per-slot results of a step: reward, and the SlotEnv's info flags (shared as ctypes typecode, read as dtype).
RESULT_FIELDS = (("reward", np.float64), ("done", np.bool_), ("is_success", np.bool_))


def step_message(film: bool, blind: bool) -> bytes:
    return bytes([STEP | (FILM if film else 0) | (BLIND if blind else 0)])


class PickleCodec:
    """The messages of a worker that this interpreter started from itself (the forkserver's): pickled, as both sides
    run the same code. A foreign worker's are JSON (vector/wire.py's `JsonCodec`)."""

    @staticmethod
    def encode_call(name: str, args: tuple, kwargs: dict[str, Any], write_obs: bool) -> bytes:
        return pickle.dumps((name, args, kwargs, write_obs))

    @staticmethod
    def decode_call(data: bytes) -> tuple[str, tuple, dict[str, Any], bool]:
        return pickle.loads(data)

    @staticmethod
    def encode_reply(ok: bool, value: Any) -> bytes:
        return pickle.dumps((ok, value))

    @staticmethod
    def decode_reply(data: bytes) -> tuple[bool, Any]:
        return pickle.loads(data)


Codec = type[PickleCodec]  # or wire.JsonCodec, which has the same four functions


def run_worker(
    index: int,
    slot_fn: Callable[[], gym.Env],
    conn: Any,
    observation_space: gym.Space,
    action_space: gym.Space,
    obs_shm: Any,
    act_shm: Any,
    res_shm: dict[str, Any],
    codec: Codec = PickleCodec,
) -> None:
    ignore_job_signals()
    try:
        env = slot_fn()
    except Exception:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send_bytes(codec.encode_reply(False, worker_failure()))
        return
    n = len(next(iter(res_shm.values())))
    actions = read_from_shared_memory(action_space, act_shm, n)
    results = {name: np.frombuffer(res_shm[name], dtype) for name, dtype in RESULT_FIELDS}
    conn.send_bytes(codec.encode_reply(True, None))
    try:
        while True:
            message = conn.recv_bytes()
            if len(message) == 1:
                film = bool(message[0] & FILM)
                try:
                    env.draw_next(observation=not message[0] & BLIND, film=film)
                    observation, reward, _, _, info = env.step(row(actions, index))
                    write_to_shared_memory(observation_space, index, observation, obs_shm)
                    results["reward"][index] = reward
                    results["done"][index] = info["done"]
                    results["is_success"][index] = info["is_success"]
                    conn.send_bytes(DONE)
                except Exception:  # noqa: BLE001
                    conn.send_bytes(codec.encode_reply(False, worker_failure()))
                    continue
                if film:
                    _prerender(env)
                continue
            try:
                name, args, kwargs, write_obs = codec.decode_call(message)
            except ValueError:  # a foreign message that breaks the schema (wire.WireError)
                conn.send_bytes(codec.encode_reply(False, worker_failure()))
                continue
            if name == "close":
                env.close()
                return
            try:
                result = getattr(env, name)(*args, **kwargs)
                if write_obs:
                    observation, result = result
                    write_to_shared_memory(observation_space, index, observation, obs_shm)
                conn.send_bytes(codec.encode_reply(True, result))
            except Exception:  # noqa: BLE001
                conn.send_bytes(codec.encode_reply(False, worker_failure()))
    except (EOFError, KeyboardInterrupt):
        env.close()


def row(batch: Any, index: int) -> Any:
    if isinstance(batch, dict):
        return {key: row(value, index) for key, value in batch.items()}
    return batch[index]


def write_row(space: gym.Space, batch: Any, index: int, value: Any) -> None:
    if isinstance(space, gym.spaces.Dict):
        for key, sub in space.spaces.items():
            write_row(sub, batch[key], index, value[key])
    else:
        batch[index] = value


def copy_tree(target: Any, source: Any) -> Any:
    """`source` copied: into `target` when given (same structure), else as new arrays."""
    if isinstance(source, dict):
        return {key: copy_tree(None if target is None else target[key], value) for key, value in source.items()}
    if target is None:
        return np.array(source, copy=True)
    np.copyto(target, source)
    return target


def _prerender(env: gym.Env) -> None:
    """The filmed step's frame, drawn right after the step was answered; a failure is left to the parent's
    `render()` call, which renders again and reports it."""
    try:
        env.prerender()
    except Exception:  # noqa: BLE001
        pass
