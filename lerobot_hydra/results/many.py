"""Three or more policies on the same episodes (a sweep over policies, checkpoints or ablations): which of them
differ.

Every pair of policies is compared with the paired test two policies get (results.pairing: the exact McNemar test on
the discordant pairs, or its mid-p version), the p-values are adjusted for the number of pairs with Holm's
step-down method (statsmodels' `multipletests`), and the compact letter display (results.letters) sums them up:
policies that share a letter are not significantly different at alpha.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.results.letters import compact_letters
from lerobot_hydra.results.pairing import ResultSet, pair_key, pairing_problem
from lerobot_hydra.results.stats import (
    MCNEMAR,
    MCNEMAR_MID_P,
    PairCounts,
    mcnemar_exact_p,
    mcnemar_mid_p,
    wilson_interval,
)
from lerobot_hydra.results.steps import steps_summary

HOLM = "Holm"


def many_problem(sets: Sequence[ResultSet]) -> str | None:
    """What the many-policy table is missing (one sentence), or None when `sets` are three or more policies whose
    episodes pair up."""
    names = ", ".join(s.name for s in sets)
    if not any(s.records for s in sets):
        return "there are no episodes to compare: the sweep is empty; run it or merge its shards first"
    if len(sets) < 3:
        return (
            f"the many-policy table needs three or more policies, got {len(sets)} ({names}); "
            "compare two with lerobot-hydra-compare A B"
        )
    for s in sets:
        if all(r.errored for r in s.records):
            return f"{s.name} holds no evaluated episodes; run it or leave it out of the many-policy table"
    for s in sets[1:]:
        reason = pairing_problem(sets[0], s)
        if reason is not None:
            return (
                f"{sets[0].name} and {s.name} cannot be paired ({reason}); the many-policy table needs every policy "
                "run with the same tasks, eval.n_episodes and seed"
            )
    return None


def many_policies(sets: Sequence[ResultSet], alpha: float = 0.05, mid_p: bool = False) -> dict[str, Any]:
    """Each policy's success, interval, steps and letters, and every pairwise test (raw and Holm-adjusted p);
    UserError (many_problem) unless three or more policies pair up."""
    from statsmodels.stats.multitest import multipletests

    problem = many_problem(sets)
    if problem is not None:
        raise UserError(problem)
    pairs = [_pair(a, b, mid_p) for a, b in combinations(sets, 2)]
    reject, adjusted, _, _ = multipletests([p["p_value"] for p in pairs], alpha=alpha, method="holm")
    for pair, p, significant in zip(pairs, adjusted, reject, strict=True):
        pair.update(p_adjusted=float(p), significant=bool(significant))
    policies = [_policy(s) for s in sets]
    best_first = [p["name"] for p in sorted(policies, key=lambda p: -p["pc_success"])]
    letters = compact_letters(best_first, [(p["a"], p["b"]) for p in pairs if p["significant"]])
    for policy in policies:
        policy["letters"] = letters[policy["name"]]
    return {
        "policies": policies,
        "pairs": pairs,
        "test": MCNEMAR_MID_P if mid_p else MCNEMAR,
        "adjustment": HOLM,
        "alpha": alpha,
    }


def _policy(s: ResultSet) -> dict[str, Any]:
    evaluated = [r for r in s.records if not r.errored]  # error episodes are no outcome (core/records.py)
    wins, n = sum(r.success for r in evaluated), len(evaluated)
    low, high = wilson_interval(wins, n)
    return {
        "name": s.name,
        "n_episodes": n,
        "successes": wins,
        "pc_success": 100.0 * wins / n,
        "ci95_pc_success": [100.0 * low, 100.0 * high],
        "n_errors": len(s.records) - n,
        **steps_summary(evaluated),
    }


def _pair(a: ResultSet, b: ResultSet, mid_p: bool) -> dict[str, Any]:
    by_key = {pair_key(r): r for r in b.records}
    pairs = [(r, by_key[pair_key(r)]) for r in a.records]
    kept = [(x, y) for x, y in pairs if not (x.errored or y.errored)]  # a pair with an error episode is dropped
    counts = PairCounts.of([(x.success, y.success) for x, y in kept])
    test = mcnemar_mid_p if mid_p else mcnemar_exact_p
    return {
        "a": a.name,
        "b": b.name,
        "n_pairs": counts.n,
        "a_only": counts.baseline_only,
        "b_only": counts.candidate_only,
        "p_value": test(counts.baseline_only, counts.candidate_only),
        "error_pairs_dropped": len(pairs) - len(kept),
    }
