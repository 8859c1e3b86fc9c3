from __future__ import annotations

import math

import pytest

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.results.aggregate import aggregate
from lerobot_hydra.results.eval_info import to_eval_info
from lerobot_hydra.results.stats import wilson_interval
from lerobot_hydra.results.table import format_table
from lerobot_hydra.rollout.plan import shard_bounds, shard_plan


def record(group: str, task_id: int, k: int, success: bool, reward: float) -> EpisodeRecord:
    return EpisodeRecord(group, task_id, f"t{task_id}", "desc", k, 1000 + k, success, reward, reward / 2, 10, 0.1)


@pytest.mark.parametrize(
    ("wins", "n", "low", "high"),
    [(0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (5, 10, 0.2366, 0.7634), (81, 100, 0.7222, 0.8749)],
)
def test_wilson_interval_matches_textbook_values(wins: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(wins, n)
    assert math.isclose(lo, low, abs_tol=1e-4) and math.isclose(hi, high, abs_tol=1e-4)


def test_aggregates_come_from_episodes_not_from_averages() -> None:
    # Group "a" has a 1-episode task and a 3-episode task: the mean of task means (75%) differs from the
    # episode mean (50%); only the latter is right.
    recs = [
        record("a", 0, 0, True, 1.0),
        record("a", 1, 0, True, 2.0),
        record("a", 1, 1, False, 0.0),
        record("a", 1, 2, False, 0.0),
    ]
    results = aggregate(recs, eval_s=8.0)
    info = to_eval_info(results)
    assert info["per_group"]["a"]["pc_success"] == 50.0
    assert info["overall"]["n_episodes"] == 4
    assert info["overall"]["avg_sum_reward"] == 0.75
    assert info["overall"]["eval_ep_s"] == 2.0
    task = info["per_task"][1]
    assert task["task_group"] == "a" and task["task_id"] == 1
    assert task["metrics"]["successes"] == [True, False, False]
    assert task["metrics"]["sum_rewards"] == [2.0, 0.0, 0.0]
    assert "overall" in format_table(results)


def test_shards_are_contiguous_balanced_and_cover_every_unit_once() -> None:
    units = [("g", t, k) for t in range(3) for k in range(7)]
    for n in (1, 2, 3, 4, 5, 21, 22):
        plans = [shard_plan([("g", t) for t in range(3)], 7, i, n) for i in range(n)]
        parts = [[(*block.key, k) for block in plan for k in block.episodes] for plan in plans]
        assert [u for p in parts for u in p] == units
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1
    assert shard_bounds(10, 3, 4) == (8, 10)
