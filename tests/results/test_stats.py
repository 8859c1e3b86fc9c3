"""Statistics against published values, and the rules that decide whether two result sets pair up."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy.special import ndtri
from scipy.stats import binomtest, fisher_exact

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.results.aggregate import aggregate
from lerobot_hydra.results.eval_info import to_eval_info
from lerobot_hydra.results.pairing import ResultSet, compare, pairing_problem
from lerobot_hydra.results.stats import (
    CONFIDENCE,
    Z95,
    PairCounts,
    mcnemar_exact_p,
    paired_difference,
    unpaired_difference,
    wilson_interval,
)
from lerobot_hydra.sweeps.summary import SweepEntry, group_arms, pick_baseline


def rec(task: str, k: int, success: bool, seed: int | None = None, init: int | None = None) -> EpisodeRecord:
    return EpisodeRecord(task, 0, task, task, k, 1000 + k if seed is None else seed, success, 0.0, 0.0, 5, 0.1, init)


def test_exact_mcnemar_p_is_the_two_sided_binomial_test_of_the_discordant_pairs() -> None:
    # 9 pairs where only the baseline succeeded, 1 where only the candidate did: 2 * P(X <= 1), X ~ Bin(10, 1/2).
    assert mcnemar_exact_p(9, 1) == pytest.approx(2 * (1 + 10) / 2**10)
    assert mcnemar_exact_p(9, 1) == pytest.approx(binomtest(1, 10, 0.5).pvalue)
    assert mcnemar_exact_p(3, 3) == 1.0 and mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(0, 6) == pytest.approx(2 / 2**6)


def test_paired_interval_reproduces_newcombes_published_example() -> None:
    # Cavo et al. (2012), complete response before/after consolidation, as tabulated by Fagerland, Lydersen &
    # Laake: 59 both, 6 first only, 16 second only, 80 neither; difference -0.0621, 95% CI -0.1186 to -0.0046.
    diff = paired_difference(PairCounts(both=59, baseline_only=16, candidate_only=6, neither=80))
    assert diff.estimate == pytest.approx(-0.0621, abs=1e-4)
    assert (diff.low, diff.high) == pytest.approx((-0.1186, -0.0046), abs=1e-4)
    assert diff.p_value == pytest.approx(binomtest(6, 22, 0.5).pvalue)


def test_unpaired_interval_reproduces_newcombes_published_example_and_fisher_comes_from_scipy() -> None:
    # Newcombe (1998), 56/70 against 48/80: difference 0.2, method 10 interval 0.0524 to 0.3339.
    diff = unpaired_difference(48, 80, 56, 70)
    assert diff.estimate == pytest.approx(0.2)
    assert (diff.low, diff.high) == pytest.approx((0.0524, 0.3339), abs=1e-4)
    assert diff.p_value == pytest.approx(fisher_exact([[56, 14], [48, 32]]).pvalue)


def test_pairs_that_all_agree_still_give_an_interval_around_zero() -> None:
    diff = paired_difference(PairCounts(both=10, baseline_only=0, candidate_only=0, neither=0))
    assert diff.estimate == 0 and diff.low < -0.2 and diff.high > 0.2 and diff.p_value == 1.0


def test_success_intervals_are_scipys_wilson_interval() -> None:
    info = to_eval_info(aggregate([rec("reach-v3", k, k < 3) for k in range(7)], 1.0))
    ci = binomtest(3, 7).proportion_ci(method="wilson")
    assert info["overall"]["ci95_pc_success"] == pytest.approx([100 * ci.low, 100 * ci.high])
    assert wilson_interval(0, 0) == (0.0, 1.0)
    # The closed form (no scipy.stats import in a run) is scipy's interval for every count up to 60 episodes.
    assert Z95 == float(ndtri(1 - (1 - CONFIDENCE) / 2))
    for n in range(1, 61):
        for wins in range(n + 1):
            ci = binomtest(wins, n).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
            low, high = wilson_interval(wins, n)
            assert math.isclose(low, ci.low, abs_tol=1e-15) and math.isclose(high, ci.high, abs_tol=1e-15)


def test_result_sets_pair_only_on_the_same_tasks_episodes_seeds_and_initial_states() -> None:
    base = ResultSet("A", [rec(t, k, k == 0, init=k) for t in ("reach", "push") for k in range(3)])
    same = ResultSet("B", [rec(t, k, True, init=k) for t in ("reach", "push") for k in range(3)])
    assert pairing_problem(base, same) is None
    other_task = ResultSet("B", [rec(t, k, True) for t in ("reach", "door") for k in range(3)])
    assert pairing_problem(base, other_task) == "different tasks (push only in A; door only in B)"
    fewer = ResultSet("B", [rec(t, k, True, init=k) for t in ("reach", "push") for k in range(2)])
    assert pairing_problem(base, fewer) == "different episode counts (reach: 3 in A, 2 in B)"
    seeds = ResultSet("B", [rec(t, k, True, seed=2000 + k, init=k) for t in ("reach", "push") for k in range(3)])
    assert pairing_problem(base, seeds) == "different seeds (reach: seeds 1000-1002 in A, seeds 2000-2002 in B)"
    inits = ResultSet("B", [rec(t, k, True, init=k + 1) for t in ("reach", "push") for k in range(3)])
    assert pairing_problem(base, inits) == "different initial states (reach episode 0: 0 in A, 1 in B)"


def test_a_paired_comparison_counts_the_discordant_pairs_per_task_and_overall() -> None:
    base = ResultSet("A", [rec("reach", k, k < 2) for k in range(4)] + [rec("push", k, False) for k in range(4)])
    cand = ResultSet("B", [rec("reach", k, k > 0) for k in range(4)] + [rec("push", k, k < 3) for k in range(4)])
    result = compare(base, cand, require_paired=True)
    reach, push = result["per_task"]
    assert (reach["n_baseline_only"], reach["n_candidate_only"]) == (1, 2)
    assert (push["n_baseline_only"], push["n_candidate_only"]) == (0, 3)
    overall = result["overall"]
    assert (overall["n_baseline_only"], overall["n_candidate_only"], overall["n_baseline"]) == (1, 5, 8)
    assert overall["diff_pc"] == pytest.approx(100 * (6 - 2) / 8)
    assert overall["p_value"] == pytest.approx(binomtest(5, 6, 0.5).pvalue)
    with pytest.raises(UserError, match=r"^A and B cannot be paired: different episode counts"):
        compare(base, ResultSet("B", cand.records[:-1]), require_paired=True)
    unpaired = compare(base, ResultSet("B", cand.records[:-1]))
    assert not unpaired["paired"] and unpaired["test"] == "Fisher exact"


def entry(label: str, identity: dict, wins: int) -> SweepEntry:
    records = [rec("reach", k, k < wins, seed=identity["seed"] + k) for k in range(4)]
    return SweepEntry(label, label, 1, identity, aggregate(records, 1.0), Path("x"), [])


def test_combinations_that_differ_only_in_seed_pool_into_one_arm() -> None:
    entries = [
        entry(f"policy={p},seed={s}", {"policy": p, "seed": s, "n_episodes": 4}, wins)
        for p, wins in (("a", 1), ("b", 3))
        for s in (1000, 2000)
    ]
    arms = group_arms(entries)
    assert [arm.name for arm in arms] == ["policy=a", "policy=b"]
    assert [len(arm.result_set().records) for arm in arms] == [8, 8]
    assert pick_baseline(arms, None) == 0 and pick_baseline(arms, "b") == 1 and pick_baseline(arms, "policy=b") == 1
    with pytest.raises(UserError, match="names none of the sweep's configurations; name one of: policy=a, policy=b"):
        pick_baseline(arms, "policy=c")
    pooled = compare(arms[0].result_set(), arms[1].result_set(), require_paired=True)
    assert pooled["overall"]["n_baseline"] == 8 and pooled["overall"]["diff_pc"] == pytest.approx(50.0)
    assert math.isclose(pooled["overall"]["p_value"], binomtest(4, 4, 0.5).pvalue)
