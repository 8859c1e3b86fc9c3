"""Steps to success: how fast a policy succeeds, beyond whether it does.

Per policy, the distribution of the steps its successful episodes took (its empirical CDF, scipy.stats.ecdf, for the
plot). Between two policies on the same episodes, the paired test of the difference on the episodes both solve: the
Wilcoxon signed-rank test (scipy.stats.wilcoxon) on the per-pair step differences. Paired, because the same seed
and initial state make some episodes harder for both; signed-rank rather than a t-test, because steps are skewed
integers with ties and a hard cap (the episode length), far from normal. Pairs with equal steps carry no direction
and are dropped (scipy's default, Wilcoxon's own rule); with ties or zeros scipy uses its normal approximation.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from lerobot_hydra.core.records import EpisodeRecord

WILCOXON = "Wilcoxon signed-rank"


def success_steps(records: Sequence[EpisodeRecord]) -> list[int]:
    """The steps of the successful episodes, sorted."""
    return sorted(r.steps for r in records if r.success)


def steps_summary(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """The successful episodes' count and the median and quartiles of their steps (None without any)."""
    steps = success_steps(records)
    if not steps:
        return {"n_success": 0, "median_steps": None, "q1_steps": None, "q3_steps": None}
    q1, _, q3 = statistics.quantiles(steps, n=4, method="inclusive") if len(steps) > 1 else (steps[0],) * 3
    return {"n_success": len(steps), "median_steps": statistics.median(steps), "q1_steps": q1, "q3_steps": q3}


def ecdf_points(records: Sequence[EpisodeRecord]) -> tuple[list[float], list[float]]:
    """The empirical CDF of the steps to success: its distinct step counts and the share of successes by each."""
    from scipy.stats import ecdf

    steps = success_steps(records)
    if not steps:
        return [], []
    cdf = ecdf(steps).cdf
    return [float(q) for q in cdf.quantiles], [float(p) for p in cdf.probabilities]


def paired_steps(pairs: Sequence[tuple[EpisodeRecord, EpisodeRecord]]) -> dict[str, Any]:
    """The (baseline, candidate) episode pairs that both solved: their count, the median step difference (candidate
    - baseline; negative: the candidate is faster) and the two-sided Wilcoxon signed-rank p-value (None when no
    pair differs)."""
    from scipy.stats import wilcoxon

    both = [(a.steps, b.steps) for a, b in pairs if a.success and b.success]
    diffs = [b - a for a, b in both]
    p_value = float(wilcoxon(diffs).pvalue) if any(diffs) else None
    return {
        "test": WILCOXON,
        "n_both": len(both),
        "median_diff_steps": statistics.median(diffs) if diffs else None,
        "p_value": p_value,
    }
