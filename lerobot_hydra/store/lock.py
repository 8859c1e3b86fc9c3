"""One writer per directory: an OS file lock (flock) on `.lerobot_hydra.lock`, held while a run (or a merge)
writes there.

The holder writes its pid, host and start time into the lock file, so a refused process can name it. The
kernel drops the lock when its holder dies however it dies (kill -9, OOM killer, node reboot), so there is
never anything to clear by hand: a lock file whose lock can be taken belongs to a dead holder and is taken
over (one log line). A holder that ends normally deletes the file before letting go of the lock.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.layout import LOCK_FILE

log = logging.getLogger("lerobot_hydra")

# flock errors that mean "this filesystem does not do locks", not "someone holds it".
PROBE_RETRIES = 5
_UNSUPPORTED = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}


def describe_holder(info: dict[str, Any]) -> str:
    if not info:
        return "a process that has not written its details yet"
    return (
        f"{info.get('what', 'a process')} (pid {info.get('pid')} on {info.get('host')}, started {info.get('started')})"
    )


def _read_info(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    try:
        info = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return info if isinstance(info, dict) else {}


class DirLock:
    """The lock of `directory`, held from `acquire()` (or `with`) until `release()`; `what` names the holder
    in other processes' messages, e.g. 'an evaluation' or 'a merge'."""

    def __init__(
        self, directory: Path, what: str, advice: str = "wait until it has ended, or give this run another directory"
    ) -> None:
        self.directory = directory
        self.path = directory / LOCK_FILE
        self.what = what
        self.advice = advice
        self._fd: int | None = None

    def acquire(self) -> DirLock:
        self.directory.mkdir(parents=True, exist_ok=True)
        attempts = 0
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = describe_holder(_read_info(fd))
                os.close(fd)
                attempts += 1
                if attempts < PROBE_RETRIES:
                    time.sleep(0.1)  # another process may be probing the lock (holder_if_locked) just now
                    continue
                raise UserError(f"{self.directory} is in use by {holder}; {self.advice}") from None
            except OSError as err:
                os.close(fd)
                if err.errno not in _UNSUPPORTED:
                    raise
                log.warning(
                    "the filesystem of %s does not support file locks (%s): nothing stops a second process from "
                    "writing there at the same time",
                    self.directory,
                    os.strerror(err.errno),
                )
                return self
            # A holder that ended deleted the file it locked: lock the file now at the path instead.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        previous = _read_info(fd)
        if previous:
            log.info("took over the lock of %s from %s, which died", self.directory, describe_holder(previous))
        info = {
            "what": self.what,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        # Deleted while still held, so that no one locks the file in the meantime and then loses it.
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder_if_locked(directory: Path) -> str | None:
    """Who holds `directory`'s lock right now (a description), or None when no live process does. Creates
    nothing."""
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return describe_holder(_read_info(fd))
    except OSError:
        return None
    finally:
        os.close(fd)
    return None
