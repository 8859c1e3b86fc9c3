"""A sweep's policy server (`+policy_server=<preset>`): what the callback checks before it submits anything, how it
names the server's clients and env, and a server that cannot start, all without SLURM (the local preset). The SLURM
runs are in test_policy_server_slurm.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lerobot_hydra.core.labels import job_subdir
from lerobot_hydra.serving.sweep_callback import count_jobs, env_overrides
from tests.conftest import run_eval

SERVED = ("policy=remote", "+policy_server=local", "policy_server.policy=act", "env.obs_type=state")


def test_server_settings_stay_out_of_shard_dirs_so_a_rerun_with_other_ones_resumes_in_place() -> None:
    plain = ["policy=remote", "env.task=reach-v3"]
    served = [*plain, "+policy_server=slurm_gpu", "policy_server.policy=act", "policy_server.overrides={device: cuda}"]
    assert job_subdir(0, 1, 2, served) == job_subdir(0, 1, 2, plain) == "env.task=reach-v3,policy=remote/shard_1_of_2"


def test_the_server_is_told_every_job_of_the_sweep_and_given_the_shards_env() -> None:
    overrides = ["env=metaworld", "env.task=[reach-v3,push-v3],[door-open-v3]", "policy=remote", "eval.shard_id=0,1,2"]
    assert count_jobs([*overrides, "eval.num_shards=3"]) == 6
    # A swept env key gives its first value: the values differ in tasks, not in what the policy reads.
    assert env_overrides(overrides) == ["env=metaworld", "env.task=[reach-v3,push-v3]"]


def test_a_single_run_with_a_policy_server_is_refused(tmp_path: Path) -> None:
    proc = run_eval(*SERVED, out_dir=tmp_path / "run", check=False, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: +policy_server starts a policy server for a sweep's shard jobs")


def test_shards_that_are_not_the_servers_clients_are_refused_before_anything_is_submitted(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    args = ("+policy_server=local", "policy_server.policy=act", "eval.shard_id=0,1")
    proc = run_eval("policy=random", *args, out_dir=sweep, multirun=True, check=False, timeout=120)
    assert proc.returncode == 2 and "use policy=remote (not policy=random)" in proc.stderr
    proc = run_eval("policy=remote", "policy.url=ws://x:1", *args, out_dir=sweep, multirun=True, check=False)
    assert proc.returncode == 2
    expected = f"the shards find their server through {sweep}/policy_server/server.json; leave policy.url out"
    assert expected in proc.stderr
    proc = run_eval("policy=remote", *args[::2], out_dir=sweep, multirun=True, check=False)  # no policy_server.policy
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: policy_server.policy is not set; name the policy to serve, e.g. policy_server.policy=act"
    )
    assert not sweep.exists()


def test_a_server_that_cannot_start_is_one_line_its_stale_announce_is_gone_and_no_shard_runs(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    stale = sweep / "policy_server" / "server.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"url": "ws://127.0.0.1:9", "pid": 1, "host": "gone", "port": 9}))
    missing = tmp_path / "no_checkpoint"
    proc = run_eval(
        *SERVED,
        f"policy_server.overrides={{policy.path: {missing}}}",
        "eval.shard_id=0,1",
        "hydra/launcher=local_shards",
        out_dir=sweep,
        multirun=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "ended before it listened (" in errors[0] and "its log: " in errors[0], proc.stderr
    assert not stale.exists()  # a shard never reads the address of a dead server
    job = json.loads((sweep / "policy_server" / "job.json").read_text())
    assert job["cluster"] == "local" and job["shards"] == 2
    assert "policy=act" in job["command"] and "env.obs_type=state" in job["command"]
    assert not list(sweep.rglob("shard_*_of_2"))


def test_a_server_of_an_earlier_run_still_alive_is_refused(tmp_path: Path) -> None:
    import socket

    sweep = tmp_path / "sweep"
    (sweep / "policy_server").mkdir(parents=True)
    announce = sweep / "policy_server" / "server.json"
    announce.write_text('{"url": "ws://127.0.0.1:9"}')
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        job = {"job_id": str(alive.pid), "cluster": "local", "host": socket.gethostname()}
        (sweep / "policy_server" / "job.json").write_text(json.dumps(job))
        proc = run_eval(*SERVED, "eval.shard_id=0,1", out_dir=sweep, multirun=True, check=False, timeout=120)
    finally:
        alive.kill()
        alive.wait()
    assert proc.returncode == 2
    assert f"from an earlier run (job {alive.pid}) is still running" in proc.stderr
    assert announce.exists()  # left to the live server
