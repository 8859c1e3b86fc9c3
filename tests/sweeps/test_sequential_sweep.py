"""hydra/sweeper=sequential for real: a sweep of two policies on MetaWorld runs in rounds and stops each task once the
paired sequential test decides, with the same episodes in-process over shards and on the local SLURM cluster; it
runs to the maximum when there is no difference; the merged eval_info.json, report.html and the sweep's summary say
why and when each task stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.launch.round_decisions import pair_combinations
from lerobot_hydra.launch.sequential_sweep import expand
from tests.conftest import read_episodes, read_json, run_eval
from tests.sweeps.test_sharding import SLURM_TIMEOUT_S, slurm  # noqa: F401  (the fixture)

SEQUENTIAL = (
    "hydra/sweeper=sequential",
    "hydra.sweeper.baseline=random",
    "hydra.sweeper.detect=30",
    "hydra.sweeper.discordance=40",
)
# The random policy never succeeds here, the expert always: every pair is discordant, decided after 2 rounds of 5.
RACE = (
    "policy=random,metaworld_expert",
    "env.task=[reach-v3,push-v3]",
    "env.obs_type=state",
    "env.episode_length=150",
    "eval.n_episodes=30",
    "eval.sequential.round=5",
    "eval.batch_size=1",
    "eval.use_async_envs=false",
)


def outcomes(run_dir: Path) -> list[tuple]:
    rows = [
        (r["task_name"], r["episode_index"], r["seed"], r["success"], r["sum_reward"]) for r in read_episodes(run_dir)
    ]
    return sorted(rows)


def merged_episodes(sweep_dir: Path, name: str) -> list[tuple]:
    info = read_json(sweep_dir / name / "eval_info.json")
    return sorted(
        (e["task_name"], e["episode_index"], e["seed"], e["success"], e["sum_reward"]) for e in info["episodes"]
    )


def assert_stopped_early(summary: dict[str, Any], outcome: str) -> None:
    assert {t: s["outcome"] for t, s in summary["per_task"].items()} == {"reach-v3": outcome, "push-v3": outcome}
    assert all(s["n_episodes"] == 10 for s in summary["per_task"].values())


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RACE over 2 shards per policy, every job in this process (the basic launcher)."""
    sweep = tmp_path_factory.mktemp("sequential_in_process")
    run_eval(*RACE, "eval.shard_id=0,1", *SEQUENTIAL, out_dir=sweep, multirun=True)
    return sweep


@pytest.mark.slow
def test_a_sequential_sweep_stops_each_task_once_decided_and_says_why(in_process: Path) -> None:
    candidate = read_json(in_process / "policy=metaworld_expert" / "eval_info.json")
    assert_stopped_early(candidate["sequential"], "better")
    assert (
        "10 won by the candidate only, 0 by the baseline only" in candidate["sequential"]["per_task"]["reach-v3"]["why"]
    )
    assert candidate["overall"]["n_episodes"] == 20
    assert sorted({e["episode_index"] for e in candidate["episodes"]}) == list(range(10))
    baseline = read_json(in_process / "policy=random" / "eval_info.json")
    assert {s["outcome"] for s in baseline["sequential"]["per_task"].values()} == {"baseline"}
    assert baseline["overall"]["n_episodes"] == 20
    assert "Sequential stopping" in (in_process / "policy=metaworld_expert" / "report.html").read_text()
    summary = read_json(in_process / "sweep_summary.json")
    assert [s["combination"] for s in summary["sequential"]] == ["policy=random", "policy=metaworld_expert"]
    report = (in_process / "report.html").read_text()
    assert "Sequential stopping" in report and "better" in report
    state = read_json(in_process / "sequential_state.json")
    assert state["baseline"] == "random" and state["n_episodes_max"] == 30

    # The same command again resumes the same sequence: nothing new runs, the same stops.
    before = merged_episodes(in_process, "policy=metaworld_expert")
    run_eval(*RACE, "eval.shard_id=0,1", *SEQUENTIAL, out_dir=in_process, multirun=True)
    assert merged_episodes(in_process, "policy=metaworld_expert") == before
    again = read_json(in_process / "policy=metaworld_expert" / "eval_info.json")["sequential"]
    assert again == candidate["sequential"]


@pytest.mark.slow
@pytest.mark.slurm
def test_on_slurm_the_same_sweep_records_the_same_episodes(slurm: None, in_process: Path, tmp_path: Path) -> None:  # noqa: F811
    sweep = tmp_path / "sweep"
    proc = run_eval(
        *RACE, *SEQUENTIAL, "hydra/launcher=submitit_slurm", out_dir=sweep, multirun=True, timeout=SLURM_TIMEOUT_S
    )
    assert "policy=metaworld_expert: reach-v3: better after 10 episodes" in proc.stdout
    for job, name in (("0", "policy=random"), ("1", "policy=metaworld_expert")):
        assert outcomes(sweep / job) == merged_episodes(in_process, name)
    assert_stopped_early(read_json(sweep / "1" / "eval_info.json")["sequential"], "better")


@pytest.mark.slow
def test_with_no_difference_every_task_runs_to_the_maximum(tmp_path: Path) -> None:
    # The expert reaches in far fewer than 120 steps: both lengths succeed on every episode, no pair is discordant.
    overrides = (
        "policy=metaworld_expert",
        "env.task=[reach-v3]",
        "env.episode_length=120,150",
        "eval.n_episodes=10",
        "eval.sequential.round=5",
        "eval.batch_size=1",
        "eval.use_async_envs=false",
        "hydra/sweeper=sequential",
        "hydra.sweeper.baseline=120",
        "hydra.sweeper.detect=30",
        "hydra.sweeper.discordance=40",
    )
    run_eval(*overrides, out_dir=tmp_path, multirun=True)
    info = read_json(tmp_path / "1" / "eval_info.json")
    (stop,) = info["sequential"]["per_task"].values()
    assert stop["outcome"] == "undecided" and stop["n_episodes"] == 10 and info["overall"]["n_episodes"] == 10
    assert "the maximum of 10 pairs" in stop["why"]


def test_jobs_are_the_sweeps_product_and_each_candidate_gets_its_baseline() -> None:
    jobs = expand(["policy=a,b", "env.task=x,y", "seed=1"])
    assert jobs[0] == ["policy=a", "env.task=x", "seed=1"] and len(jobs) == 4
    labels = sorted({",".join(sorted(job)) for job in jobs})
    pairs = pair_combinations(labels, "policy=a")
    assert pairs == {
        "env.task=x,policy=b,seed=1": "env.task=x,policy=a,seed=1",
        "env.task=y,policy=b,seed=1": "env.task=y,policy=a,seed=1",
    }
    assert pair_combinations(labels, "a") == pairs
    with pytest.raises(UserError, match="must name a swept value"):
        pair_combinations(labels, "c")


def test_a_sequential_sweep_without_its_settings_is_one_line(tmp_path: Path) -> None:
    proc = run_eval(
        "policy=random,metaworld_expert", "hydra/sweeper=sequential", out_dir=tmp_path, multirun=True, check=False
    )
    assert proc.returncode != 0
    assert "hydra/sweeper=sequential needs hydra.sweeper.baseline" in proc.stderr
    assert "Traceback" not in proc.stderr


# The random policy fails reach-v3 and push-v3: "below 50%" is decided after 8 episodes (rounds of 4) of each task.
# Over 3 shards push-v3's episodes 0..7 lie in shards 1 and 2, so the sweep's decision reads both.
BELOW = (
    "policy=random",
    "env.task=[reach-v3,push-v3]",
    "env.obs_type=state",
    "env.episode_length=30",
    "eval.n_episodes=12",
    "eval.sequential.stop=threshold",
    "eval.sequential.threshold=50",
    "eval.sequential.round=4",
    "eval.batch_size=2",  # worker processes, in the single run and in every shard job (issue 46)
)


@pytest.mark.slow
def test_one_policy_stopping_over_shards_matches_the_single_process_run(tmp_path: Path) -> None:
    single, sweep = tmp_path / "single", tmp_path / "sweep"
    run_eval(*BELOW, out_dir=single)
    run_eval(*BELOW, "eval.shard_id=0,1,2", "hydra/sweeper=sequential", out_dir=sweep, multirun=True)
    alone, merged = read_json(single / "eval_info.json"), read_json(sweep / "eval_info.json")
    assert {t: (s["outcome"], s["n_episodes"]) for t, s in alone["sequential"]["per_task"].items()} == {
        "reach-v3": ("below", 8),
        "push-v3": ("below", 8),
    }
    assert merged["sequential"] == alone["sequential"]
    assert merged["overall"]["n_episodes"] == 16
    assert alone["sequential"]["per_task"]["push-v3"]["why"] in (sweep / "report.html").read_text()
    assert merged_episodes(sweep, ".") == sorted(
        (e["task_name"], e["episode_index"], e["seed"], e["success"], e["sum_reward"]) for e in alone["episodes"]
    )
    (combo,) = read_json(sweep / "sequential_state.json")["combinations"].values()
    assert [s["n_episodes"] for s in combo["stops"]] == [8, 8]


def test_one_policy_stopping_with_shards_but_no_sequential_sweep_names_it(tmp_path: Path) -> None:
    proc = run_eval(*BELOW, "eval.num_shards=2", out_dir=tmp_path, check=False)
    assert proc.returncode != 0
    assert "eval.num_shards > 1 needs hydra/sweeper=sequential" in proc.stderr.strip().splitlines()[-1]
