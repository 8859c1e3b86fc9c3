"""Dynamic claims (`eval.claims=dynamic`) on the local SLURM cluster: a slowed shard whose work the other takes, shards
that start at different times, a shard cancelled mid-run whose claims the other takes over, and a rerun after the
whole sweep was cancelled. Every case merges to exactly the unsharded run's records, each episode recorded once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, outcome, read_json, run_eval, run_here
from tests.sweeps.test_sharding import merge_cli, slurm  # noqa: F401  (slurm: the fixture that starts the cluster)
from tests.sweeps.test_slurm_faults import episodes, finish, job_id, wait_for_an_idle_cluster, wait_for_episodes

DYNAMIC = ("eval.claims=dynamic", "hydra/launcher=submitit_slurm", "eval.max_episodes_rendered=0")
# The expert on two tasks with short episodes (some succeed, some do not).
EXPERT = ("env.task=[reach-v3,push-v3]", "eval.n_episodes=4", "env.episode_length=50", "eval.batch_size=1")
# Shard 1 of a sweep sleeps 0.3 s per step (15 s per 50-step episode); its configuration is every shard's.
SLOWED = (
    "env._target_=tests.helpers.slow_shard_env.SlowShardMetaWorldConfig",
    "+env.slow_array_task=1",
    "+env.slow_step_sleep_s=0.3",
)
# Random actions never succeed early: every episode runs its full length (~2 s).
RANDOM = (
    "env.task=[push-v3]",
    "policy=random",
    "env.obs_type=state",
    "eval.n_episodes=8",
    "env.episode_length=300",
    "eval.batch_size=1",
)
# RANDOM with every step 10 ms longer (~5 s per episode, outcomes unchanged): one shard alone takes ~40 s, so a shard
# whose job starts late (the cluster's two CPUs are shared with the rest of the suite) still finds work to claim.
PACED = (*RANDOM, "env._target_=tests.helpers.slow_shard_env.SlowShardMetaWorldConfig", "+env.step_sleep_s=0.01")
TIMEOUT_S = 420


@pytest.fixture(scope="module")
def expert_reference(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    out = tmp_path_factory.mktemp("expert")
    return [outcome(r) for r in run_here(*EXPERT, out_dir=out)["episodes"]]


@pytest.fixture(scope="module")
def random_reference(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    out = tmp_path_factory.mktemp("random")
    return [outcome(r) for r in run_here(*RANDOM, out_dir=out)["episodes"]]


def recorded(sweep: Path) -> Counter[tuple]:
    """How often each episode is recorded over every shard dir of the sweep."""
    lines = [line for path in sweep.rglob("episodes.jsonl") for line in path.read_text().splitlines()]
    return Counter(outcome(json.loads(line)) for line in lines)


def merged(sweep: Path) -> list[tuple]:
    return [outcome(r) for r in read_json(sweep / "eval_info.json")["episodes"]]


def start(sweep: Path, *overrides: str) -> subprocess.Popen[str]:
    args = [sys.executable, str(ROOT / "eval.py"), "-m", f"hydra.sweep.dir={sweep}", *DYNAMIC, *overrides]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slurm
def test_a_slowed_shards_work_is_taken_by_the_other(
    slurm: None,  # noqa: F811
    expert_reference: list[tuple],
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "sweep"
    overrides = (*EXPERT, *SLOWED, *DYNAMIC, "eval.shard_id=0,1")
    proc = run_eval(*overrides, out_dir=sweep, multirun=True, timeout=TIMEOUT_S)
    assert "Merged 2 shards" in proc.stdout, proc.stdout
    assert merged(sweep) == expert_reference
    assert set(recorded(sweep).values()) == {1} and sorted(recorded(sweep)) == sorted(expert_reference)
    # Statically the slowed shard would run 4 episodes (about a minute); the fast one took some of them.
    assert len(episodes(sweep, 1)) < 4 < len(episodes(sweep, 0)), (episodes(sweep, 0), episodes(sweep, 1))


@pytest.mark.slurm
def test_shards_started_at_different_times_merge_to_the_unsharded_run(
    slurm: None,  # noqa: F811
    random_reference: list[tuple],
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "sweep"
    wait_for_an_idle_cluster()
    first = start(sweep, *RANDOM, "eval.shard_id=0", "eval.num_shards=2")
    wait_for_episodes(sweep, 0, 1, first)
    late = start(sweep, *RANDOM, "eval.shard_id=1", "eval.num_shards=2")
    finish(late)
    finish(first)
    assert set(recorded(sweep).values()) == {1} and sorted(recorded(sweep)) == sorted(random_reference)
    check = merge_cli(sweep)
    assert check.returncode == 0, check.stdout + check.stderr
    assert merged(sweep) == random_reference


@pytest.mark.slurm
def test_a_cancelled_shards_claims_are_taken_over_and_a_rerun_completes_the_sweep(
    slurm: None,  # noqa: F811
    random_reference: list[tuple],
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "sweep"
    wait_for_an_idle_cluster()
    proc = start(sweep, *PACED, "eval.shard_id=0,1")
    jobs = job_id(sweep, 0), job_id(sweep, 1)
    wait_for_episodes(sweep, 1, 1, proc)
    subprocess.run(["scancel", jobs[1]], check=True)
    # Shard 0 runs its own episodes (0-3), then shard 1's that it left unfinished.
    took_over = _wait_for_episode_of(sweep, shard=0, first=4, proc=proc)
    subprocess.run(["scancel", jobs[0]], check=True)
    rc, out, err = finish(proc)
    assert rc == 1, err
    assert "Traceback" not in out + err, err
    assert not (sweep / "eval_info.json").exists()
    before = recorded(sweep)
    assert set(before.values()) == {1} and len(before) < 8, before
    assert took_over["episode_index"] >= 4 and took_over not in episodes(sweep, 1)

    rc, out, err = finish(start(sweep, *PACED, "eval.shard_id=0,1"))  # the same command again
    assert rc == 0, err
    assert set(recorded(sweep).values()) == {1} and sorted(recorded(sweep)) == sorted(random_reference)
    assert merged(sweep) == random_reference


def _wait_for_episode_of(sweep: Path, shard: int, first: int, proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The first episode with index >= `first` that `shard` records."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        found = [e for e in episodes(sweep, shard) if e["episode_index"] >= first]
        if found:
            return found[0]
        assert proc.poll() is None and time.monotonic() < deadline, "the shard ended before taking over"
        time.sleep(0.1)
