"""multiprocessing's forkserver and resource tracker, and the forkservers of `env.python` interpreters
(vector/foreign_server.py): the servers that start and watch every worker of this process.

They are shared by every pool of workers in the process: the runs of a paired comparison, two `Evaluator`s, an
`evaluate` inside an `Evaluator`. Each pool owner holds a `ServerLease` while it may have workers; the servers are
stopped (and waited for, else they outlive the process by up to a second) when the last lease is released. Stopping
them earlier would hang: every live worker holds a copy of the forkserver's alive pipe, so the forkserver never sees
the end-of-file it waits for.
"""

from __future__ import annotations

import gc
import multiprocessing
import threading

from lerobot_hydra.envs.base import EnvConfig

_lock = threading.RLock()  # re-entered when stopping collects an owner whose finalizer releases its lease
_leases = 0


def worker_context(config: EnvConfig) -> str:
    """forkserver keeps GL contexts and CUDA state of the parent out of the workers, and forks them quickly
    from a server that has imported the benchmark's modules once. `foreign`: workers of another interpreter
    (`env.python`, vector/foreign.py), which need no forkserver."""
    if config.python is not None:
        return "foreign"
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    preload = ["lerobot_hydra.vector.forkserver_preload", "lerobot_hydra.vector.task_envs", *config.worker_preload()]
    multiprocessing.set_forkserver_preload(preload)
    return "forkserver"


class ServerLease:
    """One owner's hold on the worker servers; `acquire` and `release` are idempotent."""

    def __init__(self) -> None:
        self.held = False

    def acquire(self) -> None:
        global _leases
        with _lock:
            if not self.held:
                self.held = True
                _leases += 1

    def release(self) -> None:
        """Gives the hold back; the last one to do so stops the servers. Call once this owner's workers are closed."""
        global _leases
        with _lock:
            if not self.held:
                if _leases == 0:  # a run that checked an env.python (its server started) and ran no workers
                    _stop_foreign_servers()
                return
            self.held = False
            _leases -= 1
            if _leases == 0:
                _stop_servers()

    def prestart(self, config: EnvConfig) -> None:
        """Holds the servers and starts the forkserver now, so that its imports overlap the parent's (policy
        loading, torch). An `env.python`'s server started when its interpreter was checked."""
        context = worker_context(config)
        if context in ("forkserver", "foreign"):
            self.acquire()
        if context != "forkserver":
            return
        from multiprocessing import forkserver

        from lerobot_hydra.vector.worker_signals import job_signals_blocked

        with job_signals_blocked():
            forkserver.ensure_running()


def leases_held() -> int:
    """How many owners hold the servers now (0: none, and they are stopped)."""
    return _leases


def _stop_servers() -> None:
    from multiprocessing import forkserver, resource_tracker

    _stop_foreign_servers()

    gc.collect()  # frees the closed workers' shared memory, which the resource tracker would otherwise unlink itself
    for server in (forkserver._forkserver, resource_tracker._resource_tracker):
        stop = getattr(server, "_stop", None)  # private, present in CPython 3.8-3.13
        if stop is not None:
            stop()


def _stop_foreign_servers() -> None:
    from lerobot_hydra.vector.foreign_server import stop_foreign_servers

    stop_foreign_servers()
