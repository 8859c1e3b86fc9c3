"""A sweep's policy server on the local SLURM cluster: one server job serving a tiny LeRobot ACT to two shard jobs
(policy=remote) on MetaWorld state observations. The merged records equal the in-process run's; the server exits
by itself once both shards are done; a server cancelled mid-run fails the shards in one line each, and rerunning
the sweep starts a new server and resumes every shard, no recorded episode lost or run twice."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from submitit.core.utils import pickle_load

from devkit.lerobot_checkpoints import tiny_act
from tests.conftest import ROOT, outcome, read_json, run_eval
from tests.sweeps.test_sharding import slurm  # noqa: F401  the session fixture that starts the local cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# 2 tasks x 5 episodes of 150 steps: a few seconds per shard, long enough to cancel the server mid-shard.
WORKLOAD = (
    "env.task=[reach-v3,push-v3]",
    "env.obs_type=state",
    "eval.n_episodes=5",
    "env.episode_length=150",
    "eval.batch_size=1",
)
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_act(tmp_path_factory.mktemp("act") / "act")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, checkpoint: Path) -> list[tuple]:
    """The same policy in-process, unsharded."""
    out = tmp_path_factory.mktemp("in_process")
    run_eval(*WORKLOAD, "policy=act", f"policy.path={checkpoint}", "device=cpu", out_dir=out)
    return [outcome(r) for r in read_json(out / "eval_info.json")["episodes"]]


def sweep_args(sweep: Path, checkpoint: Path) -> list[str]:
    return [
        sys.executable, str(ROOT / "eval.py"), "-m", f"hydra.sweep.dir={sweep}", "eval.max_episodes_rendered=0",
        *WORKLOAD, "policy=remote", "policy.connect_timeout_s=30", "eval.shard_id=0,1", "hydra/launcher=submitit_slurm",
        "+policy_server=slurm_cpu", "policy_server.policy=act",
        f"policy_server.overrides={{policy.path: {checkpoint}, device: cpu}}",
        # The local cluster's 2 CPUs: the server and one shard at a time.
        "policy_server.launcher.cpus_per_task=1", "policy_server.launcher.mem_gb=null",
    ]  # fmt: skip


def run_sweep(sweep: Path, checkpoint: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(sweep_args(sweep, checkpoint), cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)


def server_job(sweep: Path) -> dict[str, Any]:
    return json.loads((sweep / "policy_server" / "job.json").read_text())


def in_queue(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip()


def wait_gone(job_id: str, timeout_s: float = 60) -> str:
    """The job's last state while it was queued; fails if it is still there after `timeout_s`."""
    deadline, state = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline:
        now = in_queue(job_id)
        if now in ("", "COMPLETED", "CANCELLED", "FAILED"):
            return now or state
        state = now
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} is still {state} {timeout_s} s later")


def episodes(sweep: Path, shard: int) -> list[dict[str, Any]]:
    files = list(sweep.rglob(f"shard_{shard}_of_2/episodes.jsonl"))
    if not files:
        return []
    return [json.loads(line) for line in files[0].read_text().splitlines(keepends=True) if line.endswith("\n")]


def server_gone(message: str) -> bool:
    went_away = "the policy server at ws://" in message and " went away " in message
    return went_away or "no policy server answered" in message


def merged(sweep: Path) -> list[tuple]:
    return [outcome(r) for r in read_json(sweep / "eval_info.json")["episodes"]]


def test_one_server_job_serves_two_shard_jobs_as_the_in_process_run_and_exits_when_they_are_done(
    slurm: None,  # noqa: F811
    checkpoint: Path,
    reference: list[tuple],
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "sweep"
    proc = run_sweep(sweep, checkpoint)
    assert proc.returncode == 0, proc.stderr
    assert merged(sweep) == reference
    job = server_job(sweep)
    assert job["cluster"] == "slurm" and job["shards"] == 2
    assert f"policy server job {job['job_id']} submitted" in proc.stderr
    # It exited by itself once both shards said they were done: the sweep did not have to stop it.
    wait_gone(job["job_id"])
    assert "stopped the policy server" not in proc.stderr
    assert not (sweep / "policy_server" / "server.json").exists()  # a server that exits takes its address along
    log = Path(job["log_err"]).read_text() + Path(job["log_out"]).read_text()
    assert "policy server listening on" in log
    # Every shard was a client of this server, and records the checkpoint it served.
    for shard in (0, 1):
        identity = read_json(next(sweep.rglob(f"shard_{shard}_of_2.json")))["identity"]
        assert identity["policy"]["_target_"] == "lerobot_hydra.serving.client.RemotePolicyConfig"
        assert identity["checkpoint"]["served"]["policy"]["path"] == str(checkpoint)


def test_a_server_cancelled_mid_run_fails_the_shards_in_one_line_and_the_rerun_resumes_them(
    slurm: None,  # noqa: F811
    checkpoint: Path,
    reference: list[tuple],
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(sweep_args(sweep, checkpoint), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + TIMEOUT_S
    while not (episodes(sweep, 0) or episodes(sweep, 1)):
        assert proc.poll() is None and time.monotonic() < deadline, "the sweep ended before the server was cancelled"
        time.sleep(0.2)
    first = server_job(sweep)["job_id"]
    subprocess.run(["scancel", first], check=True)
    try:
        _, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    stderr = err.decode()
    assert proc.returncode == 2, stderr  # a job's error, in one line (docs/outputs.md, exit codes)
    kept = {shard: [e["episode_index"] for e in episodes(sweep, shard)] for shard in (0, 1)}
    assert sum(map(len, kept.values())) < len(reference), "the server was cancelled after every episode ran"
    assert not (sweep / "policy_server" / "server.json").exists()  # the killed server's address: removed at the end
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and server_gone(errors[0]), stderr
    # Each shard job failed with the client's one line: its server went away, or (a shard that started after the
    # cancel) none answered at the announce file.
    for result in sorted((sweep / ".submitit").glob("*_*/*_result.pkl")):
        _, returned = pickle_load(result)
        message = str(returned._return_value)
        assert len(message.splitlines()) == 1 and server_gone(message), message
    rerun = run_sweep(sweep, checkpoint)
    assert rerun.returncode == 0, rerun.stderr
    second = server_job(sweep)["job_id"]
    assert second != first
    assert merged(sweep) == reference
    for shard in (0, 1):
        indices = [(e["task_group"], e["task_id"], e["episode_index"]) for e in episodes(sweep, shard)]
        assert len(indices) == len(set(indices)) == 5, f"shard {shard}: {indices}"
        resumed = [e["episode_index"] for e in episodes(sweep, shard)][: len(kept[shard])]
        assert resumed == kept[shard]  # the episodes recorded before the cancel were kept, not run again
    wait_gone(second)
