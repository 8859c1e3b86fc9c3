"""A sweep's policy server on a real Ray cluster (the session's local Ray head): one Ray task serves a tiny LeRobot
ACT to two shard tasks (policy=remote) on MetaWorld state observations, announced through the sweep dir as on SLURM.
The merged records equal the in-process run's, and the server exits by itself once both shards are done."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devkit.lerobot_checkpoints import tiny_act
from tests.conftest import ROOT, outcome, read_json, run_eval

pytestmark = [pytest.mark.ray, pytest.mark.lerobot]

WORKLOAD = ("env.task=[reach-v3]", "env.obs_type=state", "eval.n_episodes=4", "env.episode_length=50")
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_act(tmp_path_factory.mktemp("act") / "act")


def test_one_ray_server_task_serves_two_shard_tasks_as_the_in_process_run(
    ray_head: Any, checkpoint: Path, tmp_path: Path
) -> None:
    out = tmp_path / "in_process"
    run_eval(*WORKLOAD, "eval.batch_size=1", "policy=act", f"policy.path={checkpoint}", "device=cpu", out_dir=out)
    reference = [outcome(r) for r in read_json(out / "eval_info.json")["episodes"]]

    sweep = tmp_path / "sweep"
    args = [
        sys.executable, str(ROOT / "eval.py"), "-m", f"hydra.sweep.dir={sweep}", "eval.max_episodes_rendered=0",
        *WORKLOAD, "eval.batch_size=1", "policy=remote", "policy.connect_timeout_s=60", "eval.shard_id=0,1",
        "hydra/launcher=ray_cpu", f"hydra.launcher.ray.init.address={ray_head.address}",
        "hydra.launcher.ray.remote.num_cpus=1", "+policy_server=ray_cpu", "policy_server.policy=act",
        f"policy_server.overrides={{policy.path: {checkpoint}, device: cpu}}",
        "policy_server.launcher.num_cpus=1",  # the head's 2 CPUs: the server and one shard at a time
    ]  # fmt: skip
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    assert [outcome(r) for r in read_json(sweep / "eval_info.json")["episodes"]] == reference
    job = json.loads((sweep / "policy_server" / "job.json").read_text())
    assert job["cluster"] == "ray" and job["shards"] == 2
    assert f"policy server job {job['job_id']} submitted" in proc.stderr
    assert "stopped the policy server" not in proc.stderr, "it exited by itself once both shards were done"
    assert not (sweep / "policy_server" / "server.json").exists()
    assert "policy server listening on" in Path(job["log_err"]).read_text() + Path(job["log_out"]).read_text()
    for shard in (0, 1):
        identity = read_json(next(sweep.rglob(f"shard_{shard}_of_2.json")))["identity"]
        assert identity["policy"]["_target_"] == "lerobot_hydra.serving.client.RemotePolicyConfig"
        assert identity["checkpoint"]["served"]["policy"]["path"] == str(checkpoint)
