"""The forkserver of an `env.python` interpreter, seen from the policy side.

One server per interpreter and benchmark (`server_for`): `python -m lerobot_hydra.vector.foreign_worker --server`,
which imports the benchmark once, answers with the probe's report (vector/interpreter.py checks it), then forks
each worker asked of it, as multiprocessing's forkserver does for the workers of this interpreter. Its control
socket carries JSON messages, one per datagram (SOCK_SEQPACKET), with a worker's two file descriptors attached to
its request. A forked worker is not this process's child: `ForkedProcess` watches it through a pidfd and learns its
exit status from the server. The servers stop with multiprocessing's (vector/worker_servers.py), or when this
process exits (the end of their control socket).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
from typing import Any

from lerobot_hydra.vector.foreign_worker import MAX_MESSAGE, MODULE
from lerobot_hydra.vector.wire import PROTOCOL, WireError
from lerobot_hydra.vector.worker_signals import job_signals_blocked

EXIT_REPORT_WAIT_S = 2.0  # how long a dead worker's exit status may take to arrive from its server


class ServerDown(RuntimeError):
    """The server ended; `stderr`: what it printed before its report (empty once it has answered)."""

    def __init__(self, why: str, stderr: str = "") -> None:
        super().__init__(why)
        self.stderr = stderr


class ForeignServer:
    """A started server, its report read (`ServerDown` if it ends or stays silent for `timeout_s` first)."""

    def __init__(self, command: list[str], request: dict[str, Any], timeout_s: float) -> None:
        control, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out, err = os.dup(1), os.dup(2)  # the server's own stdout and stderr once it has answered
        spec = {"v": PROTOCOL, **request, "control_fd": child.fileno(), "stdout_fd": out, "stderr_fd": err}
        try:
            with job_signals_blocked():  # it ignores them once up, as the workers it forks do
                self._popen = subprocess.Popen(
                    [*command, "-m", MODULE, "--server", json.dumps(spec)],
                    pass_fds=(child.fileno(), out, err),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
        finally:
            child.close()
            os.close(out)
            os.close(err)
        self._control = control
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        self._down = False
        try:
            self.report = self._first_answer(timeout_s)
        except BaseException:
            self.close()
            raise
        finally:
            assert self._popen.stderr is not None
            self._popen.stderr.close()

    def _first_answer(self, timeout_s: float) -> dict[str, Any]:
        if not _readable(self._control.fileno(), timeout_s):
            raise ServerDown(f"did not answer within {timeout_s:g} s")
        data = self._control.recv(MAX_MESSAGE)
        if not data:
            self._popen.wait()
            assert self._popen.stderr is not None
            raise ServerDown("ended before answering", self._popen.stderr.read().decode(errors="replace"))
        report = json.loads(data)
        if not isinstance(report, dict):
            raise ServerDown("did not answer with a report")
        return report

    def alive(self) -> bool:
        return not self._down and self._popen.poll() is None

    def fork(self, request: dict[str, Any], fds: tuple[int, int]) -> int:
        """The pid of a worker forked for `request`, `fds` (its connection, the shared mapping) passed to it."""
        with self._lock:
            try:
                socket.send_fds(self._control, [json.dumps(request).encode()], list(fds))
            except OSError as err:
                self._down = True
                raise ServerDown(f"cannot be reached ({err})") from err
            while True:
                message = self._receive(None)
                if message is not None and "pid" in message:
                    return int(message["pid"])

    def exit_code(self, pid: int, wait_s: float = EXIT_REPORT_WAIT_S) -> int | None:
        """Worker `pid`'s exit status (-N: killed by signal N); None if its server cannot tell."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            while pid not in self._exits:
                left = deadline - time.monotonic()
                if left <= 0 or self._down:
                    return None
                try:
                    self._receive(left)
                except ServerDown:
                    return None
            return self._exits[pid]

    def _receive(self, timeout_s: float | None) -> dict[str, Any] | None:
        """The next message (an exit status is recorded too); None when none came within `timeout_s`."""
        if not _readable(self._control.fileno(), timeout_s):
            return None
        data = self._control.recv(MAX_MESSAGE)
        if not data:
            self._down = True
            raise ServerDown("ended")
        message = json.loads(data)
        if not isinstance(message, dict) or message.get("v") != PROTOCOL:
            raise WireError(f"not a server message at protocol {PROTOCOL}: {data[:80]!r}")
        if set(message) == {"v", "exit", "code"}:
            self._exits[int(message["exit"])] = int(message["code"])
        elif set(message) != {"v", "pid"}:
            raise WireError(f"a server message holds v and pid, or v, exit and code: {data[:80]!r}")
        return message

    def close(self) -> None:
        """Ends the server (its workers end when their own connections close)."""
        self._down = True
        self._control.close()
        try:
            self._popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()


class ForkedProcess:
    """A worker its server forked, as the vector env handles a multiprocessing.Process."""

    def __init__(self, server: ForeignServer, pid: int) -> None:
        self.pid = pid
        self._server = server
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            self._pidfd = None  # it has already ended

    def is_alive(self) -> bool:
        return self._pidfd is not None and not _readable(self._pidfd, 0)

    def kill(self) -> None:
        if self._pidfd is not None and self.is_alive():
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def join(self, timeout: float | None = None) -> None:
        if self._pidfd is not None:
            _readable(self._pidfd, timeout)

    @property
    def exitcode(self) -> int | None:
        return None if self.is_alive() else self._server.exit_code(self.pid)

    def __del__(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


_servers: dict[tuple[str, ...], ForeignServer] = {}
_servers_lock = threading.Lock()


def server_for(command: list[str], request: dict[str, Any], timeout_s: float) -> ForeignServer:
    """The running server of `command` for `request` (the packages and modules of a probe), started if none is."""
    key = (*command, json.dumps(request, sort_keys=True))
    with _servers_lock:
        server = _servers.get(key)
        if server is None or not server.alive():
            server = _servers[key] = ForeignServer(command, request, timeout_s)
        return server


def stop_foreign_servers() -> None:
    with _servers_lock:
        while _servers:
            _servers.popitem()[1].close()


def _readable(fd: int, timeout_s: float | None) -> bool:
    return bool(select.select([fd], [], [], timeout_s)[0])
