"""How a `SlotVectorEnv` starts its worker processes and lays out their shared memory.

`ForkserverWorkers` forks them from this interpreter's multiprocessing forkserver (shared `RawArray`s, pickled
calls); `foreign.ForeignWorkers` starts them from another interpreter (`env.python`: a shared mapping passed as a
file descriptor, JSON calls). Both hand the vector env a connection with `send_bytes`/`recv_bytes`/`poll` and a
process with `is_alive`/`kill`/`join`/`exitcode`/`pid`, so that the step loop, the watchdog and respawns are one.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym

from lerobot_hydra.vector.shared_memory import lock_free_shared_memory
from lerobot_hydra.vector.slot_worker import RESULT_FIELDS, Codec, PickleCodec, run_worker

# ctypes typecodes of the result fields' dtypes, for shared RawArrays.
TYPECODES = {"reward": "d", "done": "B", "is_success": "B"}

Spaces = tuple[gym.Space, gym.Space]
Buffers = tuple[Any, Any, dict[str, Any]]  # observation and action buffers (trees), result arrays by name


class WorkerLauncher(Protocol):
    codec: Codec

    def buffers(self, spaces: Spaces, n: int) -> Buffers:
        """Shared buffers for `n` rows, allocated once per vector env."""
        ...

    def start(self, index: int, slot_fn: Callable[[], gym.Env], spaces: Spaces, buffers: Buffers) -> tuple[Any, Any]:
        """Worker `index` started: (the parent's connection to it, its process)."""
        ...

    def close(self) -> None:
        """Once every worker has ended."""
        ...


class ForkserverWorkers:
    """Workers forked by this interpreter's multiprocessing (`context`: forkserver, or spawn where it is absent)."""

    codec: Codec = PickleCodec

    def __init__(self, context: str) -> None:
        self.ctx = multiprocessing.get_context(context)

    def buffers(self, spaces: Spaces, n: int) -> Buffers:
        obs = lock_free_shared_memory(spaces[0], n, self.ctx)
        act = lock_free_shared_memory(spaces[1], n, self.ctx)
        return obs, act, {name: self.ctx.RawArray(TYPECODES[name], n) for name, _ in RESULT_FIELDS}

    def start(self, index: int, slot_fn: Callable[[], gym.Env], spaces: Spaces, buffers: Buffers) -> tuple[Any, Any]:
        parent, child = self.ctx.Pipe()
        process = self.ctx.Process(
            target=run_worker,
            name=f"lerobot_hydra-slot-{index}",
            args=(index, slot_fn, child, *spaces, *buffers),
            daemon=True,
        )
        process.start()
        child.close()
        return parent, process

    def close(self) -> None:
        pass
