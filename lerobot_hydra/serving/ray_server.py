"""The sweep's policy server as a Ray task (`+policy_server=ray_cpu|ray_gpu`, with `hydra/launcher=ray*`): the task
holds the resources of `policy_server.launcher` (num_cpus, num_gpus, as `ray.remote` takes them) and runs the server
(lerobot-hydra-serve) as its child process, logging to `<sweep dir>/policy_server/logs/`; the server announces
itself in the sweep dir as on SLURM (sweep_job.py), which must then be on a filesystem every node shares.

`RayServerJob` is what sweep_job.py's waiting and stopping expect of a job (`done`, `cancel`, `job_id`,
`paths.stderr`, `state`). The server dies with its task: cancelling it stops the child, and a worker that is killed
takes the child with it (the parent-death signal), so the Ray job's end (fate sharing) ends it too.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.layout import SERVER_LOG_DIR
from lerobot_hydra.launch.ray_connect import connect

# Linux's prctl option that sends the child a signal when its parent dies.
PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 30.0


@dataclass
class RayPaths:
    stdout: Path
    stderr: Path


class RayServerJob:
    def __init__(self, ref: Any, paths: RayPaths) -> None:
        self.ref = ref
        self.job_id = ref.task_id().hex()
        self.paths = paths

    def done(self) -> bool:
        import ray

        return bool(ray.wait([self.ref], timeout=0)[0])

    def cancel(self, check: bool = True) -> None:
        import ray

        ray.cancel(self.ref)

    @property
    def state(self) -> str:
        return "ended" if self.done() else "running or waiting for resources"


def submit_on_ray(
    launcher: dict[str, Any], init: DictConfig | None, command: list[str], folder: Path, name: str
) -> RayServerJob:
    """The server task, with `launcher` (less `cluster`) as its `ray.remote` options, on the sweep's cluster."""
    import ray

    connect(init)
    logs = folder / SERVER_LOG_DIR
    logs.mkdir(parents=True, exist_ok=True)
    paths = RayPaths(logs / "server.out", logs / "server.err")
    options = {k: v for k, v in launcher.items() if k != "cluster" and v is not None}
    options.setdefault("max_retries", 0)
    options.setdefault("name", name)
    try:
        task = ray.remote(**options)(serve)
    except (TypeError, ValueError) as err:
        raise UserError(f"bad policy_server.launcher setting for Ray: {err}") from err
    return RayServerJob(task.remote(command[1:], str(paths.stdout), str(paths.stderr)), paths)


def serve(arguments: list[str], stdout: str, stderr: str) -> int:
    """In the Ray worker: the server (this node's Python with `arguments`) until it exits; cancelling the task
    (KeyboardInterrupt here) stops it."""
    with open(stdout, "ab") as out, open(stderr, "ab") as err:
        server = subprocess.Popen([sys.executable, *arguments], stdout=out, stderr=err, preexec_fn=_die_with_parent)
        try:
            return server.wait()
        finally:
            if server.poll() is None:
                server.terminate()
                try:
                    server.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    server.kill()


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
