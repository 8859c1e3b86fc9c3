"""Shared buffers for a Gymnasium space without locks.

Gymnasium's `create_shared_memory` allocates `ctx.Array`s, each with a lock: a named POSIX semaphore in
/dev/shm that only Python's resource tracker deletes, so killing the whole process group (SLURM, the OOM
killer) leaks one per buffer. The slot workers never need those locks (each writes only its own row, and
the pipes order every access), so the buffers here are lock-free `RawArray`s; Gymnasium's
`read_from_shared_memory` and `write_to_shared_memory` read them through `get_obj()` as before.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector.utils import create_shared_memory


class RawBuffer:
    """A `RawArray` as Gymnasium's readers and writers expect a synchronized array (`get_obj()`)."""

    def __init__(self, array: Any) -> None:
        self.array = array

    def get_obj(self) -> Any:
        return self.array


class _LockFreeContext:
    """The part of a multiprocessing context that `create_shared_memory` uses, allocating without locks."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def Array(self, typecode: Any, size: int) -> RawBuffer:  # noqa: N802 - multiprocessing's name
        return RawBuffer(self._ctx.RawArray(typecode, size))


def lock_free_shared_memory(space: gym.Space, n: int, ctx: Any) -> Any:
    """Shared buffers for `n` rows of `space` (the structure `create_shared_memory` returns), no semaphores."""
    return create_shared_memory(space, n, _LockFreeContext(ctx))
