"""Many policies: the letter display on constructed cases, every pairwise test and its Holm adjustment against
scipy, the mid-p McNemar test, steps to success and its Wilcoxon test, and the one-line refusals."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy.stats import binom, binomtest, wilcoxon

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.results.letters import compact_letters
from lerobot_hydra.results.many import many_policies, many_problem
from lerobot_hydra.results.pairing import ResultSet, compare
from lerobot_hydra.results.stats import mcnemar_mid_p
from lerobot_hydra.results.steps import ecdf_points, paired_steps, steps_summary


def policy(
    name: str, wins: Callable[[int], bool], steps: Callable[[int], int] = lambda k: 40, n: int = 30
) -> ResultSet:
    """`n` episodes of one task, episode k seeded 1000 + k, succeeding where `wins(k)`, taking `steps(k)` steps."""
    records = [
        EpisodeRecord("reach-v3", 0, "reach-v3", "", k, 1000 + k, wins(k), 0.0, 0.0, steps(k), 0.1) for k in range(n)
    ]
    return ResultSet(name, records)


def test_letters_on_constructed_cases() -> None:
    assert compact_letters("abc", []) == {"a": "a", "b": "a", "c": "a"}  # all equal
    assert compact_letters("abc", [("a", "c"), ("b", "c")]) == {"a": "a", "b": "a", "c": "b"}  # one different
    assert compact_letters("abc", [("a", "c")]) == {"a": "a", "b": "ab", "c": "b"}  # a=b, b=c, a!=c
    assert compact_letters("abcd", [("a", "c"), ("a", "d"), ("b", "d")]) == {"a": "a", "b": "ab", "c": "bc", "d": "c"}
    assert compact_letters("abc", [("a", "b"), ("a", "c"), ("b", "c")]) == {"a": "a", "b": "b", "c": "c"}


def _holm(p: list[float]) -> list[float]:
    """Holm's adjustment worked by hand: the k-th smallest times (m - k), made monotone."""
    order = np.argsort(p)
    out, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def test_every_pair_is_tested_and_holm_adjusted_and_the_letters_follow() -> None:
    a = policy("A", lambda k: k % 10 != 0)  # 27/30
    b = policy("B", lambda k: k % 5 != 0)  # 24/30: A only on 3 pairs
    c = policy("C", lambda k: k < 9)  # 9/30
    table = many_policies([a, b, c])
    pairs = {(p["a"], p["b"]): p for p in table["pairs"]}
    assert set(pairs) == {("A", "B"), ("A", "C"), ("B", "C")}
    raw = []
    for (x, y), pair in pairs.items():
        sx, sy = ({"A": a, "B": b, "C": c}[n].records for n in (x, y))
        x_only = sum(r.success and not s.success for r, s in zip(sx, sy, strict=True))
        y_only = sum(s.success and not r.success for r, s in zip(sx, sy, strict=True))
        assert (pair["a_only"], pair["b_only"], pair["n_pairs"]) == (x_only, y_only, 30)
        assert pair["p_value"] == pytest.approx(binomtest(y_only, x_only + y_only, 0.5).pvalue)
        raw.append(pair["p_value"])
    for pair, adjusted in zip(pairs.values(), _holm(raw), strict=True):
        assert pair["p_adjusted"] == pytest.approx(adjusted)
        assert pair["significant"] == (adjusted < 0.05)
    letters = {p["name"]: p["letters"] for p in table["policies"]}
    assert letters == {"A": "a", "B": "a", "C": "b"}  # A and B do not differ; C differs from both
    assert (table["test"], table["adjustment"]) == ("McNemar exact", "Holm")
    top = table["policies"][0]
    low, high = binomtest(27, 30).proportion_ci(method="wilson")
    assert top["pc_success"] == pytest.approx(90.0) and top["ci95_pc_success"] == pytest.approx([100 * low, 100 * high])


def test_mid_p_is_the_exact_p_less_the_observed_split() -> None:
    for b, c in [(2, 9), (7, 1), (3, 3), (0, 6)]:
        exact = binomtest(c, b + c, 0.5).pvalue
        expected = 1.0 if b == c else exact - binom.pmf(min(b, c), b + c, 0.5)
        assert mcnemar_mid_p(b, c) == pytest.approx(expected)
        assert mcnemar_mid_p(b, c) <= exact
    base, cand = policy("A", lambda k: k % 10 != 0), policy("B", lambda k: k % 3 != 0)
    comparison = compare(base, cand, mid_p=True)
    assert comparison["test"] == "McNemar mid-p"
    overall = comparison["overall"]
    assert overall["p_value"] == pytest.approx(mcnemar_mid_p(overall["n_baseline_only"], overall["n_candidate_only"]))


def test_steps_to_success_and_their_paired_wilcoxon_test() -> None:
    base = policy("A", lambda k: k % 4 != 0, steps=lambda k: 60 + (k * 7) % 13)
    cand = policy("B", lambda k: k % 5 != 0, steps=lambda k: 50 + (k * 5) % 11)
    both = [k for k in range(30) if k % 4 and k % 5]
    diffs = [(50 + (k * 5) % 11) - (60 + (k * 7) % 13) for k in both]
    steps = compare(base, cand)["steps"]
    assert steps["n_both"] == len(both) and steps["median_diff_steps"] == np.median(diffs)
    assert steps["p_value"] == pytest.approx(wilcoxon(diffs).pvalue)
    assert steps["baseline"]["median_steps"] == np.median([60 + (k * 7) % 13 for k in range(30) if k % 4])
    xs, ps = ecdf_points(base.records)
    solved = [60 + (k * 7) % 13 for k in range(30) if k % 4]
    assert xs == sorted(set(solved)) and ps == pytest.approx([np.mean(np.array(solved) <= x) for x in xs])
    assert paired_steps(list(zip(base.records, base.records, strict=True)))["p_value"] is None  # no pair differs
    assert steps_summary(policy("C", lambda k: False).records)["median_steps"] is None


def test_what_the_many_policy_table_is_missing_is_one_line() -> None:
    a, b = policy("A", lambda k: True), policy("B", lambda k: False)
    assert many_problem([]) == "there are no episodes to compare: the sweep is empty; run it or merge its shards first"
    assert many_problem([a]) == (
        "the many-policy table needs three or more policies, got 1 (A); compare two with lerobot-hydra-compare A B"
    )
    other = policy("C", lambda k: True, n=20)
    problem = many_problem([a, b, other])
    assert problem is not None and problem.startswith("A and C cannot be paired (different episode counts")
    assert "\n" not in problem
    with pytest.raises(UserError, match="needs three or more policies, got 2"):
        many_policies([a, b])
