"""The interpreter an env's simulator workers run in (`env.python`), checked once per process before anything runs.

`env.python` is null (this interpreter: the forkserver's workers, nothing changed), a Python executable (a virtual
environment's `bin/python`), or a command prefix ending in one (`apptainer exec image.sif python`,
`uv run --python 3.11 python`). The check starts the forkserver of the env's workers there once
(vector/foreign_server.py), which imports the benchmark and reports as `--probe` does, and refuses, in one line
naming `env.python`: an interpreter that cannot be started, one without this package, one whose
lerobot_hydra or message protocol differs from this side's, one without the benchmark (its distributions, or
modules it cannot import), and simulator versions the benchmark is known to fail under (`EnvConfig.check_simulator`).
The probe's versions are the simulator side's provenance. `simulator_facts` asks that interpreter (this one when
`env.python` is null, in a process of its own) what only a built simulator knows of a task (`EnvConfig.measure`).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.vector.foreign_server import ForeignServer, ServerDown, server_for
from lerobot_hydra.vector.foreign_worker import MODULE
from lerobot_hydra.vector.wire import PROTOCOL, env_to_json

if TYPE_CHECKING:
    from lerobot_hydra.envs.base import EnvConfig, TaskSpec

# The simulator side's packages recorded besides the env's own distributions.
SIMULATOR_CORE = ("mujoco", "gymnasium", "numpy")
PROBE_TIMEOUT_S = 300.0
ROOT = Path(__file__).resolve().parents[2]
MAKE_ONE = "bash scripts/sim_env.sh <benchmark> <dir> makes one"


@dataclass(frozen=True)
class SimulatorSide:
    """The interpreter of an env's workers, as its probe found it."""

    command: tuple[str, ...]
    python: str  # its Python version
    lerobot_hydra: str
    packages: dict[str, str | None]  # SIMULATOR_CORE and the env's distributions

    def versions(self) -> dict[str, Any]:
        """What the run's provenance and fingerprint record of this side."""
        return {"python": self.python, "packages": dict(self.packages)}


def worker_command(setting: str) -> list[str]:
    """`env.python` as the command it starts (a path, or a prefix split as a shell would)."""
    command = shlex.split(str(setting))
    if not command:
        raise UserError("env.python is empty; give a Python executable (e.g. .venvs/x/bin/python) or null")
    return command


def simulator_side(env: EnvConfig) -> SimulatorSide | None:
    """The checked interpreter of `env`'s workers; None for this interpreter (env.python null)."""
    if env.python is None:
        return None
    setting, packages, modules = _request(env)
    where = f"env.python={setting}"
    side = _checked(where, worker_command(setting), _probe(setting, packages, modules), packages)
    env.check_simulator(side.packages, f"{where} has")
    return side


def simulator_facts(env: EnvConfig, task: TaskSpec) -> dict[str, Any]:
    """`env.measure(task)` as the simulator side answers it; one process per interpreter and env settings measures
    every task of `env` (never this process: no simulator is built in the parent)."""
    node = env_to_json(env.without_processors())
    tasks = [dataclasses.asdict(t) for t in env.tasks()]
    found = _facts(env.python, json.dumps({"v": PROTOCOL, "env": node, "tasks": tasks}, sort_keys=True))
    return found[[t["name"] for t in tasks].index(task.name)]


@cache
def _facts(setting: str | None, request: str) -> list[dict[str, Any]]:
    where = f"env.python={setting}" if setting is not None else "this interpreter"
    command = worker_command(setting) if setting is not None else [sys.executable]
    report = _ask(where, command, "--facts", request)
    if isinstance(report.get("user_error"), str):
        raise UserError(report["user_error"])
    if not isinstance(report.get("facts"), list):
        raise UserError(f"{where} did not measure the env's tasks as a Python with lerobot_hydra does ({MAKE_ONE})")
    return report["facts"]


def worker_server(env: EnvConfig) -> ForeignServer:
    """The running forkserver of `env`'s workers in `env.python` (started again if it was stopped)."""
    return _server(*_request(env))


def _request(env: EnvConfig) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """`env.python`, the packages whose versions its probe reports, the modules it imports (the workers' own)."""
    packages = tuple(dict.fromkeys([*SIMULATOR_CORE, *env.distributions()]))
    return str(env.python), packages, (type(env).__module__, *env.worker_preload())


@cache
def _probe(setting: str, packages: tuple[str, ...], modules: tuple[str, ...]) -> dict[str, Any]:
    """The report of the interpreter's forkserver (once per process and interpreter)."""
    return _server(setting, packages, modules).report


def _server(setting: str, packages: tuple[str, ...], modules: tuple[str, ...]) -> ForeignServer:
    where = f"env.python={setting}"
    request = {"packages": list(packages), "modules": list(modules)}
    try:
        return server_for(worker_command(setting), request, PROBE_TIMEOUT_S)
    except OSError as err:
        raise UserError(f"{where} cannot be started ({err}); give a Python executable ({MAKE_ONE})") from err
    except ServerDown as down:
        if not down.stderr:
            raise UserError(f"{where} {down} as a Python with lerobot_hydra does ({MAKE_ONE})") from down
        raise UserError(_failed_probe(where, down.stderr)) from down


def _ask(where: str, command: list[str], form: str, request: str) -> dict[str, Any]:
    """The one JSON object the worker module prints for `form` (--facts); a UserError when there is none."""
    try:
        done = subprocess.run(
            [*command, "-m", MODULE, form, request],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise UserError(f"{where} cannot be started ({err}); give a Python executable ({MAKE_ONE})") from err
    if done.returncode != 0:
        raise UserError(_failed_probe(where, done.stderr))
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        report = None
    if not isinstance(report, dict):
        raise UserError(f"{where} did not answer as a Python with lerobot_hydra does ({MAKE_ONE})")
    return report


def _failed_probe(where: str, stderr: str) -> str:
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "no message"
    if "No module named" in last and "lerobot_hydra" in last:
        return (
            f"{where} has no lerobot_hydra; install this package there without its dependencies: "
            f"<python> -m pip install --no-deps -e {ROOT} ({MAKE_ONE})"
        )
    if "No module named" in last:
        return f"{where} cannot run lerobot_hydra's worker ({last}); install gymnasium and numpy there ({MAKE_ONE})"
    return f"{where} is broken: {last}"


def _checked(where: str, command: list[str], report: dict[str, Any], packages: tuple[str, ...]) -> SimulatorSide:
    ours, theirs = version("lerobot_hydra"), report.get("lerobot_hydra")
    if theirs != ours or report.get("v") != PROTOCOL:
        raise UserError(
            f"{where} runs lerobot_hydra {theirs} (protocol {report.get('v')}), this side lerobot_hydra {ours} "
            f"(protocol {PROTOCOL}); install the same version on both sides"
        )
    for module, error in (report.get("imports") or {}).items():
        if error is not None:
            raise UserError(f"{where} cannot import {module} ({error}); install the benchmark there ({MAKE_ONE})")
    found = report.get("packages") or {}
    missing = [name for name in packages if found.get(name) is None]
    if missing:
        raise UserError(f"{where} lacks {', '.join(missing)}; install the benchmark there ({MAKE_ONE})")
    return SimulatorSide(tuple(command), str(report.get("python")), str(theirs), {n: found[n] for n in packages})
