"""A simulator worker of another interpreter (`env.python`): `python -m lerobot_hydra.vector.foreign_worker`.

It needs only the simulator's own packages, gymnasium, numpy and this package installed without its dependencies
(no torch, Hydra or LeRobot: `bash scripts/sim_env.sh` makes such an environment). Two forms, both started by the
policy side (vector/foreign.py, vector/interpreter.py), never by hand:

- `--probe REQUEST`: prints one JSON object: this side's protocol, lerobot_hydra version, Python, the versions of the
  packages REQUEST names and, for each module it names, the error importing it (null: imported).
- `--facts REQUEST`: prints one JSON object: what `EnvConfig.measure` answers for each task REQUEST names, in a
  simulator built here (`facts`), or the refusal of the env's settings (`user_error`).
- `--server SPEC`: the forkserver of this interpreter's workers (`run_server`). It imports the modules SPEC names once,
  sends the `--probe` report on its control socket, then forks a worker for each request there: a JSON object
  naming the slot and its spaces, with the file descriptors of the worker's connection and of the shared mapping its
  rows live in attached (SCM_RIGHTS). It answers each with the worker's pid, and reports each worker's exit status.
  A worker runs the same loop as an in-family worker (slot_worker.run_worker) with JSON calls (vector/wire.py).
"""

from __future__ import annotations

import functools
import importlib
import json
import mmap
import os
import platform
import signal
import socket
import sys
import traceback
from importlib.metadata import PackageNotFoundError, version
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.vector.shared_memory import mapped_buffers
from lerobot_hydra.vector.slot_env import SlotEnv
from lerobot_hydra.vector.slot_worker import RESULT_FIELDS, run_worker
from lerobot_hydra.vector.wire import PROTOCOL, JsonCodec, WireError, env_from_json
from lerobot_hydra.vector.worker_signals import ignore_job_signals, job_signals

MODULE = "lerobot_hydra.vector.foreign_worker"
SPEC_KEYS = {"v", "index", "n", "spaces", "metadata", "render_threads", "conn_fd", "shm_fd", "shm_size", "preload"}
# What a fork request names; the two descriptors travel beside it.
REQUEST_KEYS = SPEC_KEYS - {"conn_fd", "shm_fd"}
SERVER_KEYS = {"v", "packages", "modules", "control_fd", "stdout_fd", "stderr_fd"}
MAX_MESSAGE = 1 << 20  # a control message (a worker's spaces and metadata as JSON) is a few kB


def space_to_json(space: gym.Space) -> dict[str, Any]:
    """A Box or Dict space as JSON: the shapes and dtypes the shared buffers are laid out from."""
    if isinstance(space, gym.spaces.Dict):
        return {"dict": {key: space_to_json(sub) for key, sub in space.spaces.items()}}
    if isinstance(space, gym.spaces.Box):
        return {"box": {"shape": list(space.shape), "dtype": space.dtype.str}}
    raise TypeError(f"a {type(space).__name__} space cannot reach a foreign worker (Box and Dict spaces can)")


def space_from_json(data: Any) -> gym.Space:
    if isinstance(data, dict) and set(data) == {"dict"} and isinstance(data["dict"], dict):
        return gym.spaces.Dict({key: space_from_json(sub) for key, sub in data["dict"].items()})
    if isinstance(data, dict) and set(data) == {"box"} and set(data["box"]) == {"shape", "dtype"}:
        dtype = np.dtype(data["box"]["dtype"])
        low, high = _bounds(dtype)
        return gym.spaces.Box(low, high, tuple(int(d) for d in data["box"]["shape"]), dtype)
    raise WireError(f"not a space: {str(data)[:80]}")


def _bounds(dtype: np.dtype) -> tuple[Any, Any]:
    """The widest bounds of `dtype`: the worker lays out and fills buffers, and never samples or clips."""
    if dtype == np.bool_:
        return 0, 1
    if np.issubdtype(dtype, np.integer):
        return np.iinfo(dtype).min, np.iinfo(dtype).max
    return -np.inf, np.inf


def probe(request: dict[str, Any]) -> dict[str, Any]:
    """What the policy side checks before it starts a worker here."""
    imports: dict[str, str | None] = {}
    for module in request.get("modules", []):
        try:
            importlib.import_module(module)
            imports[module] = None
        except Exception as err:  # noqa: BLE001 - reported to the policy side, which refuses in one line
            imports[module] = f"{type(err).__name__}: {err}".splitlines()[0]
    return {
        "v": PROTOCOL,
        "lerobot_hydra": _version("lerobot_hydra"),
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in request.get("packages", [])},
        "imports": imports,
    }


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def facts(request: dict[str, Any]) -> dict[str, Any]:
    """What the env's simulator tells of each task (its spaces' sizes), measured here for the policy side."""
    if not isinstance(request, dict) or set(request) != {"v", "env", "tasks"} or request["v"] != PROTOCOL:
        raise WireError(f"a facts request holds exactly v, env and tasks at protocol {PROTOCOL}")
    env = env_from_json(request["env"])
    try:
        return {"v": PROTOCOL, "facts": [env.measure(TaskSpec(**task)) for task in request["tasks"]]}
    except UserError as err:
        return {"v": PROTOCOL, "user_error": str(err)}


def serve(spec: dict[str, Any]) -> None:
    """Runs the worker `spec` describes until the policy side closes it."""
    if not isinstance(spec, dict) or set(spec) != SPEC_KEYS or spec["v"] != PROTOCOL:
        raise WireError(f"a worker spec holds exactly {sorted(SPEC_KEYS)} at protocol {PROTOCOL}")
    ignore_job_signals()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, job_signals())  # blocked by the parent while it started this process
    for module in spec["preload"]:
        importlib.import_module(module)
    spaces = (space_from_json(spec["spaces"][0]), space_from_json(spec["spaces"][1]))
    memory = mmap.mmap(spec["shm_fd"], spec["shm_size"])
    obs, act, res = mapped_buffers(memoryview(memory), spaces, spec["n"], RESULT_FIELDS)
    slot_fn = functools.partial(SlotEnv, spec["index"], *spaces, spec["metadata"], spec["render_threads"])
    run_worker(spec["index"], slot_fn, Connection(spec["conn_fd"]), *spaces, obs, act, res, codec=JsonCodec)


def run_server(spec: dict[str, Any]) -> None:
    """Imports `spec`'s modules, reports as `probe` does, then forks a worker per request until the policy side
    closes the control socket. Until the report is sent, stdout and stderr are the policy side's pipes (what a failed
    import printed); from then on they are its own stdout and stderr, which the workers inherit."""
    if not isinstance(spec, dict) or set(spec) != SERVER_KEYS or spec["v"] != PROTOCOL:
        raise WireError(f"a server spec holds exactly {sorted(SERVER_KEYS)} at protocol {PROTOCOL}")
    ignore_job_signals()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, job_signals())  # blocked by the parent while it started this process
    report = probe(spec)
    sys.stdout.flush()
    for fd, target in ((spec["stdout_fd"], 1), (spec["stderr_fd"], 2)):
        os.dup2(fd, target)
        os.close(fd)
    control = socket.socket(fileno=spec["control_fd"])
    signal.signal(signal.SIGCHLD, lambda *_: _report_exits(control))
    control.send(json.dumps(report).encode())
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 2)
        except OSError:
            break
        if not data:
            break  # the policy side closed it (or exited): its workers end when their own connections close
        request = json.loads(data)
        if not isinstance(request, dict) or set(request) != REQUEST_KEYS or request["v"] != PROTOCOL or len(fds) != 2:
            raise WireError(f"a fork request holds exactly {sorted(REQUEST_KEYS)} and two descriptors")
        pid = os.fork()
        if pid == 0:
            _forked(control, {**request, "conn_fd": fds[0], "shm_fd": fds[1]})
        for fd in fds:
            os.close(fd)
        control.send(json.dumps({"v": PROTOCOL, "pid": pid}).encode())


def _forked(control: socket.socket, spec: dict[str, Any]) -> None:
    """A forked worker's whole life: it never returns into the server's loop."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    control.close()
    code = 0
    try:
        serve(spec)
    except BaseException:  # noqa: BLE001 - the worker's end, as an uncaught exception would end an interpreter
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _report_exits(control: socket.socket) -> None:
    """Each ended worker's exit status, as multiprocessing gives it (-N: killed by signal N), to the policy side."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        try:
            control.send(json.dumps({"v": PROTOCOL, "exit": pid, "code": os.waitstatus_to_exitcode(status)}).encode())
        except OSError:
            return  # the policy side is gone


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--probe":
        print(json.dumps(probe(json.loads(args[1]))))
    elif len(args) == 2 and args[0] == "--facts":
        print(json.dumps(facts(json.loads(args[1]))))
    elif len(args) == 2 and args[0] == "--server":
        run_server(json.loads(args[1]))
    else:
        forms = "--probe REQUEST | --facts REQUEST | --server SPEC"
        sys.exit(f"usage: python -m {MODULE} {forms} (started by lerobot_hydra, not by hand)")


if __name__ == "__main__":
    main()
