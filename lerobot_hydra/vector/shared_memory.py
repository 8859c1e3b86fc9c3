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
import numpy as np
from gymnasium.vector.utils import create_shared_memory

# Where each buffer of `mapped_buffers` starts in the mapping: a multiple of this many bytes.
ALIGN = 64


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


Results = tuple[tuple[str, Any], ...]  # (name, numpy dtype) of each per-row result


def buffer_sizes(spaces: tuple[gym.Space, gym.Space], n: int, results: Results) -> tuple[Any, Any, dict[str, int]]:
    """The bytes of each buffer of `n` rows: trees shaped like the observation and action spaces, and per result."""

    def tree(space: gym.Space) -> Any:
        if isinstance(space, gym.spaces.Dict):
            return {key: tree(sub) for key, sub in space.spaces.items()}
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"a {type(space).__name__} space has no buffer for foreign workers (Box and Dict do)")
        return n * int(np.prod(space.shape)) * space.dtype.itemsize

    return tree(spaces[0]), tree(spaces[1]), {name: n * np.dtype(dtype).itemsize for name, dtype in results}


def mapped_size(spaces: tuple[gym.Space, gym.Space], n: int, results: Results) -> int:
    """The bytes `mapped_buffers` lays out (each buffer starting at a multiple of `ALIGN`)."""
    return sum(-(-size // ALIGN) * ALIGN for size in _leaves(buffer_sizes(spaces, n, results)))


def mapped_buffers(
    memory: memoryview, spaces: tuple[gym.Space, gym.Space], n: int, results: Results
) -> tuple[Any, Any, dict[str, Any]]:
    """The observation, action and result buffers of `n` rows, one after the other in `memory` (a shared mapping
    of `mapped_size` bytes: both sides of a foreign worker compute the same layout from the same spaces), as
    `lock_free_shared_memory` and the result arrays of in-family workers."""
    offset = 0

    def take(size: int) -> memoryview:
        nonlocal offset
        view, offset = memory[offset : offset + size], offset + -(-size // ALIGN) * ALIGN
        return view

    def tree(sizes: Any) -> Any:
        return {key: tree(sub) for key, sub in sizes.items()} if isinstance(sizes, dict) else RawBuffer(take(sizes))

    obs_sizes, act_sizes, res_sizes = buffer_sizes(spaces, n, results)
    obs, act = tree(obs_sizes), tree(act_sizes)
    return obs, act, {name: take(res_sizes[name]).cast(np.dtype(dtype).char) for name, dtype in results}


def _leaves(tree: Any) -> list[int]:
    if isinstance(tree, dict):
        return [size for value in tree.values() for size in _leaves(value)]
    if isinstance(tree, tuple):
        return [size for value in tree for size in _leaves(value)]
    return [tree]
