"""LeRobot's result keys in eval_info.json, the compare CLI reading lerobot-eval's eval_info.json, and the verdicts
and exit codes a CI gate reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.results.aggregate import aggregate
from lerobot_hydra.results.eval_info import to_eval_info
from lerobot_hydra.results.pairing import ResultSet, compare
from lerobot_hydra.results.verdicts import HELD, IMPROVED, REGRESSED, UNDERPOWERED, holm
from lerobot_hydra.sweeps.compare import compare_dirs
from lerobot_hydra.sweeps.compare import main as compare_main


def rec(group: str, task_id: int, k: int, success: bool) -> EpisodeRecord:
    return EpisodeRecord(group, task_id, f"{group}{task_id}", "", k, 1000 + k, success, 1.0, 1.0, 5, 0.1)


def outcomes(group: str, task_id: int, wins: list[bool]) -> list[EpisodeRecord]:
    return [rec(group, task_id, k, w) for k, w in enumerate(wins)]


def write_run(path: Path, records: list[EpisodeRecord]) -> Path:
    path.mkdir(parents=True)
    (path / "eval_info.json").write_text(json.dumps(to_eval_info(aggregate(records, 1.0))))
    return path


def test_eval_info_carries_lerobots_counts_and_wilson_intervals_at_every_level() -> None:
    # LeRobot's own test of its keys: suite_a/0 9 of 10, suite_a/1 5 of 10, suite_b/0 0 of 10.
    records = [
        *outcomes("suite_a", 0, [True] * 9 + [False]),
        *outcomes("suite_a", 1, [True] * 5 + [False] * 5),
        *outcomes("suite_b", 0, [False] * 10),
    ]
    info = to_eval_info(aggregate(records, 1.0))
    task = info["per_task"][0]
    assert (task["n_episodes"], task["n_success"], task["pc_success"]) == (10, 9, 90.0)
    assert task["pc_success_ci95"] == pytest.approx([59.58, 98.21], abs=0.05)
    group = info["per_group"]["suite_a"]
    assert (group["n_episodes"], group["n_success"], group["pc_success"]) == (20, 14, 70.0)
    assert group["pc_success_ci95"] == pytest.approx([48.10, 85.45], abs=0.05)
    overall = info["overall"]
    assert (overall["n_episodes"], overall["n_success"]) == (30, 14)
    assert overall["pc_success_ci95"] == pytest.approx([30.23, 63.86], abs=0.05)


def lerobot_eval_info(per_task: dict[tuple[str, int], list[bool]], seeds: bool) -> dict:
    """The layout lerobot-eval writes: per-task lists under `metrics`, no episode records."""
    tasks = []
    for (group, task_id), wins in per_task.items():
        metrics = {"sum_rewards": [1.0] * len(wins), "max_rewards": [1.0] * len(wins), "successes": wins}
        if seeds:
            metrics["seeds"] = [1000 + k for k in range(len(wins))]
        tasks.append({"task_group": group, "task_id": task_id, "metrics": metrics})
    return {"per_task": tasks, "per_group": {}, "overall": {"pc_success": 0.0, "n_episodes": 0}}


def test_lerobot_evals_eval_info_pairs_by_seed_where_recorded_and_is_unpaired_otherwise(tmp_path: Path) -> None:
    ours = write_run(tmp_path / "ours", outcomes("reach-v3", 0, [True] * 8 + [False] * 2))
    wins = [True] * 6 + [False] * 4
    for seeds in (True, False):
        theirs = tmp_path / f"theirs_{seeds}"
        theirs.mkdir()
        (theirs / "eval_info.json").write_text(json.dumps(lerobot_eval_info({("reach-v3", 0): wins}, seeds)))
        comparison = compare_dirs(theirs, ours)
        assert comparison["overall"]["pc_baseline"] == 60.0 and comparison["overall"]["pc_candidate"] == 80.0
        if seeds:
            assert comparison["paired"] and comparison["paired_on"] == "task, episode and seed"
            assert comparison["overall"]["n_candidate_only"] == 2
        else:
            assert not comparison["paired"]
            assert comparison["unpaired_reason"] == "A is lerobot-eval's eval_info.json, which records no episode seeds"


def test_verdicts_per_task_group_and_overall() -> None:
    n = 60
    base = [
        *outcomes("g", 0, [True] * n),  # 100% -> 50%: regressed
        *outcomes("g", 1, [True] * (n // 2) + [False] * (n // 2)),  # 50% -> 100%: improved
        *outcomes("h", 0, [True] * 100),  # 100% -> 100% over 100 pairs: held
        *outcomes("u", 0, [True, False] * 3),  # 6 episodes, 3 discordant pairs: underpowered
    ]
    cand = [
        *outcomes("g", 0, [True] * (n // 2) + [False] * (n // 2)),
        *outcomes("g", 1, [True] * n),
        *outcomes("h", 0, [True] * 100),
        *outcomes("u", 0, [False, True] * 3),
    ]
    comparison = compare(ResultSet("A", base), ResultSet("B", cand))
    assert comparison["paired"]
    assert [t["verdict"] for t in comparison["per_task"]] == [REGRESSED, IMPROVED, HELD, UNDERPOWERED]
    held = comparison["per_task"][2]
    assert held["mde_pc"] is not None and held["mde_pc"] <= 10
    assert comparison["per_task"][3]["mde_pc"] > 10
    assert comparison["per_group"]["h"]["verdict"] == HELD
    assert comparison["overall"]["verdict"] == comparison["verdict"]


def test_holm_adjusts_in_step_down_order() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_compare_exits_1_on_a_significant_regression_only_when_asked(tmp_path: Path, capsys) -> None:
    good = write_run(tmp_path / "good", outcomes("reach-v3", 0, [True] * 40))
    bad = write_run(tmp_path / "bad", outcomes("reach-v3", 0, [True] * 20 + [False] * 20))
    assert compare_main([str(good), str(bad)]) == 0
    out = capsys.readouterr().out
    assert "regressed" in out and "detectable" in out
    assert compare_main([str(good), str(bad), "--fail-on-regression"]) == 1
    assert compare_main([str(bad), str(good), "--fail-on-regression", "task"]) == 0  # improved
    assert compare_main([str(good), str(bad), "--alpha", "2"]) == 2
