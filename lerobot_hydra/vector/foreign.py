"""Simulator workers started from another interpreter (`env.python`): a virtual environment's python, or a command
prefix ending in one (`apptainer exec image.sif python`).

Each worker is forked by that interpreter's forkserver (`python -m lerobot_hydra.vector.foreign_worker --server`,
vector/foreign_server.py), given two file descriptors: its end of a socket pair (the same length-prefixed messages
as a multiprocessing pipe, holding JSON calls: vector/wire.py) and an anonymous shared mapping (`memfd`) that holds
every row's observation, action and results, laid out from the spaces by both sides alike
(shared_memory.mapped_buffers). A step is the same one byte each way as for an in-family worker. A worker that dies
is replaced like any other (`SlotVectorEnv.replace_workers`).
"""

from __future__ import annotations

import mmap
import os
import socket
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym

from lerobot_hydra.vector.foreign_server import ForeignServer, ForkedProcess, ServerDown
from lerobot_hydra.vector.foreign_worker import space_to_json
from lerobot_hydra.vector.launchers import Buffers, Spaces
from lerobot_hydra.vector.shared_memory import mapped_buffers, mapped_size
from lerobot_hydra.vector.slot_worker import RESULT_FIELDS, Codec
from lerobot_hydra.vector.wire import PROTOCOL, JsonCodec


class ForeignWorkers:
    """Starts a vector env's workers from the forkserver `server` gives (the interpreter's, running); `preload`:
    modules each worker imports before it answers (the server's own, already imported)."""

    codec: Codec = JsonCodec

    def __init__(
        self,
        server: Callable[[], ForeignServer],
        metadata: dict[str, Any],
        render_threads: int | None,
        preload: list[str],
    ) -> None:
        self.server, self.metadata, self.render_threads, self.preload = server, metadata, render_threads, preload
        self._fd: int | None = None
        self._size = 0
        self._n = 0

    def buffers(self, spaces: Spaces, n: int) -> Buffers:
        self._size, self._n = mapped_size(spaces, n, RESULT_FIELDS), n
        self._fd = os.memfd_create("lerobot_hydra-slots")
        os.ftruncate(self._fd, self._size)
        memory = mmap.mmap(self._fd, self._size)
        return mapped_buffers(memoryview(memory), spaces, n, RESULT_FIELDS)

    def start(self, index: int, slot_fn: Callable[[], gym.Env], spaces: Spaces, buffers: Buffers) -> tuple[Any, Any]:
        """Worker `index`, which makes its `SlotEnv` from the same settings as `slot_fn` (which stays here)."""
        assert self._fd is not None, "buffers() comes first"
        parent, child = socket.socketpair()
        request = {
            "v": PROTOCOL,
            "index": index,
            "n": self._n,
            "spaces": [space_to_json(spaces[0]), space_to_json(spaces[1])],
            "metadata": self.metadata,
            "render_threads": self.render_threads,
            "shm_size": self._size,
            "preload": self.preload,
        }
        try:
            try:
                server = self.server()
                pid = server.fork(request, (child.fileno(), self._fd))
            except ServerDown:  # it was stopped or killed: once more from a fresh one
                server = self.server()
                pid = server.fork(request, (child.fileno(), self._fd))
        finally:
            child.close()
        return Connection(parent.detach()), ForkedProcess(server, pid)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the mapping lives on in this process's views until they are dropped
            self._fd = None
