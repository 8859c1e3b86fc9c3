"""The policy server of a sweep as a job of its own (SLURM, a local process, or a Ray task: ray_server.py):
submitted, awaited until it listens, and stopped when it outlives every shard job.

Its files live in `<sweep dir>/policy_server/`: `server.json`, the announce file the server writes once it listens
(the shards' `policy.url` names it), `job.json` (its job id, cluster and logs, written here at submission) and the
job's logs under `logs/`. Before a server is submitted the announce file of any earlier one is deleted, so a shard
never reads the address of a dead server; a server still alive from an earlier run of the sweep is refused.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from lerobot_hydra.core.commands import hydra_value
from lerobot_hydra.core.durable import write_json_atomic
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.layout import SERVER_ANNOUNCE_FILE, SERVER_DIR, SERVER_JOB_FILE, SERVER_LOG_DIR
from lerobot_hydra.launch.outcomes import UNFINISHED
from lerobot_hydra.launch.slurm_limits import check_partition

SERVE_MODULE = "lerobot_hydra.app.serve"
# Executor settings every submitit executor takes unprefixed (the others get the cluster's prefix, as in Hydra's
# submitit launcher): hydra_plugins.hydra_submitit_launcher.config.BaseQueueConf.
BASE_PARAMETERS = {"timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb", "nodes", "name"}
CLUSTERS = ("slurm", "local", "ray")
SERVER_JOB_NAME = "lerobot_hydra_policy_server"
POLL_S = 0.5


@dataclass
class PolicyServerConfig:
    # The policy the server loads: an option of the policy group (conf/policy/<name>.yaml), as policy= in eval.py.
    policy: str = MISSING
    # More server settings, key: value as lerobot-hydra-serve takes them: {policy.path: /ckpt, device: cuda}.
    overrides: dict[str, Any] | None = None
    # Seconds the sweep waits for the server job to start and listen before it submits the shards.
    ready_timeout_s: float = 3600.0
    # The server job: `cluster` (slurm | local | ray) and its settings, as in the hydra/launcher presets (submitit's
    # executor settings; on Ray, the `ray.remote` options: num_cpus, num_gpus, ...).
    launcher: dict[str, Any] = field(default_factory=dict)


def server_dir(sweep_dir: Path) -> Path:
    return sweep_dir / SERVER_DIR


def announce_path(sweep_dir: Path) -> Path:
    return server_dir(sweep_dir) / SERVER_ANNOUNCE_FILE


def read_settings(node: DictConfig) -> PolicyServerConfig:
    """The `policy_server` node checked against its schema: unknown keys and wrong types are one line."""
    from omegaconf.errors import OmegaConfBaseException

    if OmegaConf.is_missing(node, "policy"):
        raise UserError("policy_server.policy is not set; name the policy to serve, e.g. policy_server.policy=act")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(PolicyServerConfig), node)
        settings: PolicyServerConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as err:
        raise UserError(f"bad policy_server setting: {str(err).splitlines()[0]}") from err
    cluster = settings.launcher.get("cluster", "slurm")
    if cluster not in CLUSTERS:
        raise UserError(f"policy_server.launcher.cluster={cluster!r} is not one of {', '.join(CLUSTERS)}")
    if settings.ready_timeout_s <= 0:
        raise UserError(f"policy_server.ready_timeout_s must be above 0, got {settings.ready_timeout_s}")
    for key in settings.overrides or {}:
        if key.lstrip("+~") in {"policy", "serve.announce", "serve.shards", "serve.port", "hydra.run.dir"}:
            raise UserError(
                f"policy_server.overrides sets {key}, which the sweep sets for its server; "
                + ("choose the policy with policy_server.policy" if key == "policy" else "leave it out")
            )
    return settings


def server_command(settings: PolicyServerConfig, sweep_dir: Path, shards: int, env: list[str]) -> list[str]:
    """The server's command line: the served policy, the shards' env (a LeRobot policy's features are checked
    against it), its settings, and where and for how many shards it serves."""
    folder = server_dir(sweep_dir)
    return [
        sys.executable,
        "-m",
        SERVE_MODULE,
        f"policy={settings.policy}",
        *env,
        *(f"{key}={hydra_syntax(value)}" for key, value in (settings.overrides or {}).items()),
        "serve.port=0",
        f"serve.announce={announce_path(sweep_dir)}",
        f"serve.shards={shards}",
        f"hydra.run.dir={folder}",
    ]


def hydra_syntax(value: Any) -> str:
    """A setting's value written as a Hydra override reads it back."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {hydra_syntax(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(hydra_syntax(v) for v in value) + "]"
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return hydra_value(str(value)) if isinstance(value, str) else str(value)


def exec_server(command: list[str]) -> None:
    """Runs in the job: becomes the server process, so the cluster's signals reach it directly."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


def refuse_live_server(sweep_dir: Path) -> None:
    """An earlier server of this sweep that is still running would serve shards beside the new one: refuse. (A Ray
    server cannot outlive the sweep that started it: Ray ends a driver's tasks with it, see ray_server.py.)"""
    path = server_dir(sweep_dir) / SERVER_JOB_FILE
    try:
        job = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    alive = False
    if job.get("cluster") == "slurm":
        out = subprocess.run(["squeue", "-h", "-j", str(job["job_id"]), "-o", "%T"], capture_output=True, text=True)
        alive = out.returncode == 0 and out.stdout.strip() in UNFINISHED
    elif job.get("host") == socket.gethostname():
        try:
            os.kill(int(job["job_id"]), 0)
            alive = True
        except (OSError, ValueError):
            alive = False
    if alive:
        stop = f"scancel {job['job_id']}" if job.get("cluster") == "slurm" else f"kill {job['job_id']}"
        raise UserError(
            f"the policy server of {sweep_dir} from an earlier run (job {job['job_id']}) is still running; let its "
            f"shards finish, or stop it ({stop}), then run the sweep again"
        )


def submit(
    settings: PolicyServerConfig, sweep_dir: Path, shards: int, env: list[str], ray_init: DictConfig | None = None
) -> Any:
    """Deletes any earlier announce file, submits the server job and records it in job.json (on Ray: a task on the
    cluster `ray_init` joins, the sweep launcher's `hydra.launcher.ray.init`)."""
    refuse_live_server(sweep_dir)
    folder = server_dir(sweep_dir)
    folder.mkdir(parents=True, exist_ok=True)
    announce_path(sweep_dir).unlink(missing_ok=True)
    launcher = dict(settings.launcher)
    cluster = launcher.pop("cluster", "slurm")
    command = server_command(settings, sweep_dir, shards, env)
    if cluster == "ray":
        from lerobot_hydra.serving.ray_server import submit_on_ray

        if ray_init is None:
            raise UserError(
                "policy_server.launcher.cluster=ray runs the server on the sweep's Ray cluster; launch the shards "
                "there too with hydra/launcher=ray (or ray_cpu, ray_gpu)"
            )
        job = submit_on_ray(launcher, ray_init, command, folder, SERVER_JOB_NAME)
    else:
        job = _submit_submitit(launcher, cluster, folder, command)
    record = {
        "job_id": str(job.job_id),
        "cluster": cluster,
        "host": socket.gethostname(),
        "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "log_out": str(job.paths.stdout),
        "log_err": str(job.paths.stderr),
        "command": command,
        "shards": shards,
    }
    write_json_atomic(folder / SERVER_JOB_FILE, record)
    return job


def _submit_submitit(launcher: dict[str, Any], cluster: str, folder: Path, command: list[str]) -> Any:
    import submitit

    init = {f"{cluster}_max_num_timeout": launcher.pop("max_num_timeout")} if "max_num_timeout" in launcher else {}
    if cluster == "slurm":  # a job no node can hold would stay pending while the sweep waits for it to listen
        check_partition(launcher, "the policy server job", "policy_server.launcher")
    executor = submitit.AutoExecutor(folder=folder / SERVER_LOG_DIR / "%j", cluster=cluster, **init)
    launcher.setdefault("name", SERVER_JOB_NAME)
    params = {k if k in BASE_PARAMETERS else f"{cluster}_{k}": v for k, v in launcher.items() if v is not None}
    try:
        executor.update_parameters(**params)
    except (TypeError, ValueError, NameError) as err:
        raise UserError(f"bad policy_server.launcher setting: {err}") from err
    try:
        return executor.submit(exec_server, command)
    except Exception as err:  # noqa: BLE001 - sbatch's refusal (a partition, an account) is the user's to fix
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        reason = lines[-1] if lines else type(err).__name__
        raise UserError(f"submitting the policy server job failed ({reason}); check policy_server.launcher") from err


def wait_until_listening(job: Any, sweep_dir: Path, timeout_s: float) -> dict[str, Any]:
    """The server's announce once it is written; a job that ends first, or a timeout, is one line (and no job)."""
    path = announce_path(sweep_dir)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            announce = _read_announce(path)
            if announce is not None:
                return announce
            if job.done():
                raise UserError(
                    f"the policy server (job {job.job_id}) ended before it listened{_last_words(job)}; "
                    f"its log: {job.paths.stderr}"
                )
            if time.monotonic() > deadline:
                job.cancel(check=False)
                raise UserError(
                    f"the policy server (job {job.job_id}, {_state(job)}) did not listen within "
                    f"policy_server.ready_timeout_s={timeout_s:g} s, so it was cancelled; its log: {job.paths.stderr}"
                )
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        job.cancel(check=False)
        print(f"lerobot_hydra: stopped (Ctrl-C); the policy server job {job.job_id} was cancelled", file=sys.stderr)
        raise SystemExit(130) from None


def stop_if_outliving(job: Any, shard_jobs: list[Any], sweep_dir: Path, grace_s: float = 20.0) -> None:
    """At the sweep's end: a server whose shard jobs have all ended exits by itself once each said "done"; one
    that is still up (a shard failed, or found its work recorded and never connected) is cancelled. The announce
    file of a server that ended without removing it (killed) is removed."""
    if job.done():
        announce_path(sweep_dir).unlink(missing_ok=True)
        return
    if not all(j.done() for j in shard_jobs):
        print(
            f"lerobot_hydra: the policy server job {job.job_id} keeps running for the shard jobs still running",
            file=sys.stderr,
        )
        return
    deadline = time.monotonic() + grace_s
    while not job.done() and time.monotonic() < deadline:
        time.sleep(POLL_S)
    if not job.done():
        job.cancel(check=False)
        print(f"lerobot_hydra: stopped the policy server job {job.job_id}: every shard job has ended", file=sys.stderr)
    announce_path(sweep_dir).unlink(missing_ok=True)


def _read_announce(path: Path) -> dict[str, Any] | None:
    try:
        announce = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # not there yet (the server writes it whole, so a parse error is a foreign file: wait)
    return announce if isinstance(announce, dict) and announce.get("url") else None


def _state(job: Any) -> str:
    try:
        return str(job.state)
    except Exception:  # noqa: BLE001 - only for a message
        return "state unknown"


def _last_words(job: Any) -> str:
    """The last non-empty line of the job's stderr (the server's one-line error), or the job's state."""
    try:
        lines = [line.strip() for line in Path(job.paths.stderr).read_text().splitlines() if line.strip()]
    except OSError:
        lines = []
    return f" ({lines[-1]})" if lines else f" (state: {_state(job)})"
