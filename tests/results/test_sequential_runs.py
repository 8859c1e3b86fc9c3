"""Sequential stopping on real MetaWorld runs: the stopping point and the records do not depend on batch size, async
workers or a kill and resume; a paired sequential comparison stops early on a clear difference and runs to the
maximum on none; eval_info.json and report.html say when and why each task stopped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lerobot_hydra.sweeps.compare import compare_dirs
from lerobot_hydra.sweeps.compare import main as compare_main
from tests.conftest import ROOT, read_episodes, read_json, run_eval
from tests.store.test_store import kill_group, start_eval, wait_for

pytestmark = pytest.mark.slow

# The random policy fails reach-v3 in 100 steps: "below 15%" is decided after some 40 episodes, in rounds of 10.
BELOW = (
    "env.task=[reach-v3]",
    "policy=random",
    "env.obs_type=state",
    "env.episode_length=100",
    "eval.n_episodes=100",
    "eval.sequential.stop=threshold",
    "eval.sequential.threshold=15",
    "eval.sequential.round=10",
)


def outcomes(run_dir: Path) -> list[tuple]:
    return [(r["episode_index"], r["seed"], r["success"], r["sum_reward"]) for r in read_episodes(run_dir)]


def test_the_stopping_point_and_records_do_not_depend_on_batch_size_workers_or_a_resume(tmp_path: Path) -> None:
    one = tmp_path / "one"
    run_eval(*BELOW, "eval.batch_size=1", "eval.use_async_envs=false", out_dir=one)
    info = read_json(one / "eval_info.json")
    (stop,) = info["sequential"]["per_task"].values()
    assert stop["outcome"] == "below" and stop["n_episodes"] % 10 == 0 and stop["n_episodes"] < 100
    assert info["complete"] and info["overall"]["n_episodes"] == stop["n_episodes"]
    assert "lies below the threshold 15%" in stop["why"]
    assert (
        "Sequential stopping" in (one / "report.html").read_text() and stop["why"] in (one / "report.html").read_text()
    )

    batched = tmp_path / "batched"
    run_eval(*BELOW, "eval.batch_size=3", "eval.use_async_envs=true", out_dir=batched)
    assert outcomes(batched) == outcomes(one)
    # The shard files record the stop, so the runs merge and compare as complete runs.
    assert compare_dirs(one, batched)["paired"]
    assert read_json(batched / "eval_info.json")["sequential"]["per_task"] == info["sequential"]["per_task"]

    resumed = tmp_path / "resumed"
    killed = start_eval(resumed, *BELOW, "eval.batch_size=2")  # with workers: the mode-pair row of a resume
    try:
        episodes = resumed / "episodes.jsonl"
        wait_for(lambda: episodes.exists() and len(episodes.read_text().splitlines()) >= 15, killed)
    finally:
        kill_group(killed)
    assert len(read_episodes(resumed)) < stop["n_episodes"]
    run_eval(*BELOW, "eval.batch_size=2", out_dir=resumed)
    assert sorted(outcomes(resumed)) == outcomes(one)
    assert read_json(resumed / "eval_info.json")["sequential"]["per_task"] == info["sequential"]["per_task"]


COMMON = (
    "env.task=[reach-v3,push-v3]",
    "env.obs_type=state",
    "env.episode_length=150",
    "eval.n_episodes=30",
    "eval.sequential.round=10",
    "eval.batch_size=2",  # both sides' workers live at once (issue 46: the first side's close hung)
    "eval.max_episodes_rendered=0",
)


def race(out: Path, baseline: str, candidate: str) -> subprocess.CompletedProcess[str]:
    args = [
        "--baseline",
        baseline,
        "--candidate",
        candidate,
        "--detect",
        "30",
        "--discordance",
        "40",
        "--out",
        str(out),
    ]
    command = [sys.executable, "-m", "lerobot_hydra.app.paired_sequential", *args, "--", *COMMON]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_a_paired_sequential_comparison_stops_early_on_a_clear_difference_and_not_on_none(tmp_path: Path) -> None:
    clear = race(tmp_path / "clear", "policy=random", "policy=metaworld_expert")
    summary = read_json(tmp_path / "clear" / "sequential.json")
    assert {t: s["outcome"] for t, s in summary["per_task"].items()} == {"reach-v3": "better", "push-v3": "better"}
    assert all(s["n_episodes"] < 30 for s in summary["per_task"].values())
    assert "reach-v3: better after" in clear.stdout
    for side in ("baseline", "candidate"):
        info = read_json(tmp_path / "clear" / side / "eval_info.json")
        assert info["sequential"] == summary and info["complete"]
        assert info["overall"]["n_episodes"] == sum(s["n_episodes"] for s in summary["per_task"].values())
        assert "Sequential stopping" in (tmp_path / "clear" / side / "report.html").read_text()

    # The stopped run dirs compare and gate as any: the candidate's gain is a regression read the other way round.
    gate = [str(tmp_path / "clear" / "candidate"), str(tmp_path / "clear" / "baseline"), "--fail-on-regression"]
    assert compare_main(gate) == 1
    assert compare_main([gate[1], gate[0], "--fail-on-regression"]) == 0

    race(tmp_path / "none", "policy=random", "policy=random")
    summary = read_json(tmp_path / "none" / "sequential.json")
    assert all(s["outcome"] == "undecided" and s["n_episodes"] == 30 for s in summary["per_task"].values())
    assert read_json(tmp_path / "none" / "candidate" / "eval_info.json")["overall"]["n_episodes"] == 60
