"""Autotune for policy servers: the shards-per-server and batch-size rule on known numbers, and a real probe of a tiny
LeRobot ACT on MetaWorld whose recommendation must follow from what it measured."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from devkit.lerobot_checkpoints import TINY_ACT, tiny_act
from lerobot_hydra.app import autotune_server
from lerobot_hydra.app.autotune_server import SAFETY, batch_sizes, recommend_server, sweep_command
from lerobot_hydra.core.errors import UserError
from tests.conftest import ROOT


def test_a_simulated_accelerator_with_a_flat_cost_per_call_serves_many_shards_at_its_largest_batch() -> None:
    # 40 ms a call whatever the batch up to 32 (the simulated accelerator); LIBERO-like shards: 7 obs/s each.
    throughput = {b: b / 0.040 for b in batch_sizes(32)}
    rec = recommend_server(7.0, 1, 4, throughput)
    assert rec.max_batch_size == 32
    assert rec.shards == math.floor(SAFETY * 32 / 0.040 / 7.0) == 91
    assert rec.shards * 7.0 <= SAFETY * throughput[32] < (rec.shards + 1) * 7.0


def test_a_batch_the_shards_cannot_fill_is_not_recommended() -> None:
    # One row per shard: batch 8 would allow 7 shards, which never ask 8 chunks at once; batch 4 allows 6 and fills.
    rec = recommend_server(5.0, 1, 1, {1: 10.0, 2: 20.0, 4: 40.0, 8: 45.0})
    assert (rec.shards, rec.max_batch_size) == (6, 4)
    # With chunks of 5 actions a shard asks 5x less often, so more shards fit and batch 8 fills.
    rec = recommend_server(5.0, 5, 1, {1: 10.0, 2: 20.0, 4: 40.0, 8: 45.0})
    assert (rec.shards, rec.max_batch_size) == (36, 8)


def test_a_server_slower_than_one_shard_is_named_the_bottleneck() -> None:
    rec = recommend_server(100.0, 1, 2, {1: 10.0, 2: 15.0})
    # One shard of 2 rows fills batch 2, the fastest: the recommendation and its reason agree with the table.
    assert rec.shards == 1 and rec.max_batch_size == 2
    assert "the server is the bottleneck" in rec.reasons[0] and "(12.0/s at batch 2)" in rec.reasons[0]
    assert rec.reasons[1].startswith("serve.max_batch_size=2: the highest measured throughput (15.0/s)")
    # One row per shard never fills batch 2: batch 1, named the best a batch it fills answers.
    rec = recommend_server(100.0, 1, 1, {1: 10.0, 2: 15.0})
    assert rec.max_batch_size == 1 and "(8.0/s at batch 1)" in rec.reasons[0]
    assert sweep_command(["policy=act"], rec, 10) == ["python", "eval.py", "policy=act"]


def test_the_recommended_sweep_serves_the_probed_policy_to_remote_shards() -> None:
    rec = recommend_server(10.0, 1, 2, {1: 100.0, 2: 200.0})
    overrides = ["env.task=reach-v3", "policy=act", "policy.path=/ckpt", "device=cuda", "eval.batch_size=2"]
    command = sweep_command(overrides, rec, episodes=4)
    assert command[:4] == ["python", "eval.py", "-m", "env.task=reach-v3"]
    assert "policy=remote" in command and "eval.shard_id=0,1,2,3" in command  # capped at the run's 4 episodes
    assert "+policy_server=slurm_gpu" in command and "policy_server.policy=act" in command
    assert "policy_server.overrides={policy.path: /ckpt, device: cuda, serve.max_batch_size: 2}" in command


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_act(tmp_path_factory.mktemp("act") / "act")


def test_a_real_probe_recommends_what_its_own_measurements_imply(checkpoint: Path, one_torch_thread: None) -> None:
    overrides = [
        "env.task=reach-v3",
        "env.obs_type=state",
        "policy=act",
        f"policy.path={checkpoint}",
        "device=cpu",
        "eval.n_episodes=2",
        "eval.batch_size=2",
        "eval.max_episodes_rendered=0",
    ]
    rec = autotune_server.run(overrides, max_batch=4)
    assert sorted(rec.throughput) == [1, 2, 4] and all(mu > 0 for mu in rec.throughput.values())
    assert rec.obs_per_s > 0 and rec.env_batch_size == 2
    assert rec.steps_per_request == TINY_ACT["n_action_steps"]  # ACT queues its chunk: one request per 8 steps
    again = recommend_server(rec.obs_per_s, rec.steps_per_request, rec.env_batch_size, rec.throughput)
    assert (rec.shards, rec.max_batch_size) == (again.shards, again.max_batch_size)
    capacity = SAFETY * rec.throughput[rec.max_batch_size]
    assert rec.shards == 1 or rec.shards * rec.requests_per_s <= capacity
    assert (rec.shards + 1) * rec.requests_per_s > capacity


def test_a_bad_max_batch_is_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "lerobot_hydra.app.autotune", "--server", "--max-batch", "x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --max-batch needs a whole number, e.g. --max-batch 32"


def test_a_policy_the_server_cannot_serve_is_refused_in_one_line() -> None:
    overrides = ["env.task=reach-v3", "env.obs_type=state", "policy=random", "eval.n_episodes=1", "eval.batch_size=1"]
    with pytest.raises(UserError, match="cannot be served yet"):
        autotune_server.run(overrides, max_batch=1)
