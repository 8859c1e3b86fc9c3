"""A Ray head on this machine for the tests: 2 CPUs on 127.0.0.1, its own temp dir and free ports (so it neither
joins nor disturbs another Ray on the machine), stopped by the ids of its own processes (`ray stop` would stop
every Ray of the machine).

Its workers get this checkout on PYTHONPATH through the head's environment, which Ray's workers inherit; on a real
cluster every node has lerobot_hydra installed (docs/launchers.md).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil

START_TIMEOUT_S = 180


@dataclass
class RayHead:
    address: str
    temp_dir: Path
    client_port: int

    def processes(self) -> list[psutil.Process]:
        """The head's processes (found by its temp dir or its client server's port) and their children."""
        marks = (str(self.temp_dir), f"--port={self.client_port}")
        found: dict[int, psutil.Process] = {}
        me = psutil.Process()
        mine = {me.pid, *(p.pid for p in me.parents())}
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if proc.pid not in mine and any(mark in cmdline for mark in marks):
                for p in [proc, *_children(proc)]:
                    found[p.pid] = p
        return list(found.values())

    def stop(self) -> None:
        procs = self.processes()
        for proc in procs:
            _signal(proc, kill=False)
        _, alive = psutil.wait_procs(procs, timeout=5)
        for proc in alive:
            _signal(proc, kill=True)
        psutil.wait_procs(alive, timeout=10)


def start_head(root: Path) -> RayHead:
    """`ray start --head` with the checkout at `root` on its workers' PYTHONPATH; raises RuntimeError if it fails
    (the head's processes are stopped then)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="ray_", dir="/tmp"))  # short: Ray's socket paths are limited in length
    gcs, client, agent, dashboard = _free_ports(4)
    head = RayHead(f"127.0.0.1:{gcs}", temp_dir, client)
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "RAY_USAGE_STATS_ENABLED": "0"}
    args = [
        str(Path(sys.executable).with_name("ray")), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}",
        f"--ray-client-server-port={client}",
        f"--dashboard-agent-listen-port={agent}", f"--dashboard-port={dashboard}", "--include-dashboard=false",
        "--min-worker-port=0", "--max-worker-port=0", "--num-cpus=2", "--num-gpus=0", f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]  # fmt: skip
    proc = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    if proc.returncode != 0:
        head.stop()
        raise RuntimeError(f"ray start failed:\n{proc.stdout}\n{proc.stderr}")
    return head


def worker_pids(head: RayHead, task_name: str) -> list[int]:
    """The pids of the head's worker processes running a task of that name (Ray titles them ray::<name>)."""
    return [p.pid for p in head.processes() if _title(p) == f"ray::{task_name}"]


def _title(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline()).strip()
    except psutil.Error:
        return ""


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []


def _signal(proc: psutil.Process, kill: bool) -> None:
    try:
        proc.kill() if kill else proc.terminate()
    except psutil.Error:
        pass


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
