"""Error episodes through a sweep: each shard counts its own, the merge, the sweep summary, both report pages and the
W&B runs count them as `n_errors`, and the sweep exits 3 once merged (docs/faults.md#error-episodes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import outcome, read_episodes, read_json, run_eval
from tests.loggers.test_wandb import offline_runs

# CartPole, random actions; episode 1 of task 0 fails at every attempt: shard 0 of 2 holds it.
FAULTY = (
    "env=gym",
    "env.gym_id=CartPole-v1",
    "env._target_=devkit.faulty_env.FaultyGymEnvConfig",
    '+env.faults=["0:1:always"]',
    "policy=random",
    "eval.n_episodes=4",
    "eval.batch_size=2",
)


def test_a_sweeps_error_episodes_are_counted_by_its_merge_summary_reports_and_wandb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    sweep = tmp_path / "sweep"
    args = (*FAULTY, "seed=1000,2000", "eval.shard_id=0,1", "logger=wandb", "logger.wandb.mode=offline")
    proc = run_eval(*args, multirun=True, out_dir=sweep, check=False)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("lerobot_hydra: 2 error episode(s)"), proc.stderr

    summary = read_json(sweep / "sweep_summary.json")
    assert [(row["n_episodes"], row["n_errors"]) for row in summary["combinations"]] == [(3, 1), (3, 1)]
    for row in summary["combinations"]:
        info = read_json(sweep / row["eval_info"])
        assert (info["overall"]["n_errors"], info["per_task"][0]["n_errors"]) == (1, 1)
        assert [e["episode_index"] for e in info["episodes"] if e["error"]] == [1]
        report = (sweep / row["eval_info"]).parent / "report.html"
        assert "error episodes" in report.read_text()
    assert "<th>error episodes</th>" in (sweep / "report.html").read_text()
    table = proc.stdout[proc.stdout.index("combination") :].splitlines()[0]
    assert table.split()[-1] == "errors", table

    runs = offline_runs(sweep)
    merged = [r["summary"]["overall/n_errors"] for r in runs if r["job_type"] == "merged"]
    shards = sorted(r["summary"]["overall/n_errors"] for r in runs if r["job_type"] == "shard")
    assert merged == [1, 1] and shards == [0, 0, 1, 1]


def test_an_unhealthy_dynamic_shard_releases_its_claims_and_the_other_shard_runs_them(tmp_path: Path) -> None:
    from lerobot_hydra.sweeps.shards import merge_sweep

    sweep = tmp_path / "sweep"
    args = (*FAULTY[:3], *FAULTY[4:6], "eval.n_episodes=8", "eval.batch_size=1", "eval.num_shards=2")
    dynamic = (*args, "eval.claims=dynamic")
    # Shard 0 on an unhealthy node (every episode fails): it stops after its first three, its blocks released.
    unhealthy = {"FAULTY_ENV_ALL": "1"}
    sick = run_eval(*dynamic, "eval.shard_id=0", out_dir=sweep / "shard_0_of_2", env=unhealthy, check=False)
    assert sick.returncode == 2 and "likely an unhealthy node" in sick.stderr, sick.stderr
    assert [r["error"] is not None for r in read_episodes(sweep / "shard_0_of_2")] == [True] * 3
    # Shard 1 takes every block, those shard 0 finished with error episodes included, without waiting for a lease.
    run_eval(*dynamic, "eval.shard_id=1", out_dir=sweep / "shard_1_of_2", env={"FAULTY_ENV_OFF": "1"})
    assert sorted(r["episode_index"] for r in read_episodes(sweep / "shard_1_of_2")) == list(range(8))
    result = merge_sweep(sweep)
    assert result.ok and result.n_errors == 0, result.problems
    merged = read_json(sweep / "eval_info.json")
    clean = tmp_path / "clean"
    run_eval(*args[:-1], out_dir=clean, env={"FAULTY_ENV_OFF": "1"})
    reference = read_json(clean / "eval_info.json")["episodes"]
    assert sorted(map(outcome, merged["episodes"])) == sorted(map(outcome, reference)), "equal to a fault-free run"
