"""The statistics every table, plot and comparison uses, from scipy.

- A success rate's 95% interval: Wilson's score interval, in closed form (Newcombe 1998, method 3); it equals
  `scipy.stats.binomtest(...).proportion_ci(method="wilson")` to the last bit or two, without importing
  scipy.stats (about a second) in a run that needs no test.
- Two policies on the same episodes (paired): the exact McNemar test, a binomial test on the discordant pairs
  (`scipy.stats.binomtest`), and Newcombe's hybrid score interval for the difference of paired rates.
- On different episodes (unpaired): Fisher's exact test (`scipy.stats.fisher_exact`) and Newcombe's hybrid score
  interval for the difference of independent rates.

Neither scipy nor statsmodels has an interval for a difference of paired proportions, so Newcombe's "square and
add" (Newcombe 1998, method 10; recommended by Fagerland, Lydersen & Laake 2014) combines scipy's Wilson interval
of each rate here. It stays informative with few episodes: a bootstrap over pairs collapses to [0, 0] when every
pair agrees, which is common with 10 episodes per task. Without the correlation term it is the independent-sample
interval (Newcombe 1998, method 10 there too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CONFIDENCE = 0.95
# The standard normal quantile of 1 - (1 - CONFIDENCE) / 2: scipy.special.ndtri(0.975).
Z95 = 1.959963984540054
MCNEMAR, MCNEMAR_MID_P, FISHER = "McNemar exact", "McNemar mid-p", "Fisher exact"


def wilson_interval(successes: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a success rate, as fractions; (0, 1) without episodes."""
    if n == 0:
        return (0.0, 1.0)
    p, z2 = successes / n, Z95 * Z95
    denominator = 2 * (n + z2)
    center = (2 * n * p + z2) / denominator
    half = Z95 * math.sqrt(z2 + 4 * n * p * (1 - p)) / denominator
    return (float(center - half), float(center + half))


@dataclass(frozen=True)
class Difference:
    """Candidate rate minus baseline rate (fractions), its 95% interval and a two-sided test's p-value."""

    baseline: float
    candidate: float
    low: float
    high: float
    p_value: float
    test: str

    @property
    def estimate(self) -> float:
        return self.candidate - self.baseline


@dataclass(frozen=True)
class PairCounts:
    """Outcomes of episode pairs (the same task, seed and initial state under the baseline and the candidate)."""

    both: int
    baseline_only: int
    candidate_only: int
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.baseline_only + self.candidate_only + self.neither

    @classmethod
    def of(cls, pairs: list[tuple[bool, bool]]) -> PairCounts:
        """From (baseline success, candidate success) pairs."""
        return cls(
            sum(a and b for a, b in pairs),
            sum(a and not b for a, b in pairs),
            sum(b and not a for a, b in pairs),
            sum(not a and not b for a, b in pairs),
        )


def mcnemar_exact_p(baseline_only: int, candidate_only: int) -> float:
    """Two-sided exact McNemar p-value: under no difference each discordant pair goes either way with chance 1/2."""
    discordant = baseline_only + candidate_only
    if discordant == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(candidate_only, discordant, 0.5).pvalue)


def mcnemar_mid_p(baseline_only: int, candidate_only: int) -> float:
    """Two-sided mid-p McNemar p-value: the exact one less the chance of the observed split itself (Lancaster's
    mid-p). Less conservative than the exact test: its size is close to alpha on average, but not guaranteed below."""
    discordant = baseline_only + candidate_only
    if discordant == 0:
        return 1.0
    from scipy.stats import binom

    fewer = min(baseline_only, candidate_only)
    return float(min(1.0, 2 * binom.cdf(fewer - 1, discordant, 0.5) + binom.pmf(fewer, discordant, 0.5)))


def paired_difference(counts: PairCounts, mid_p: bool = False) -> Difference:
    """Candidate minus baseline over paired episodes: Newcombe's paired interval and the exact McNemar test (its
    mid-p version with `mid_p`)."""
    n = counts.n
    baseline = (counts.both + counts.baseline_only) / n
    candidate = (counts.both + counts.candidate_only) / n
    low, high = _square_and_add(
        candidate,
        wilson_interval(counts.both + counts.candidate_only, n),
        baseline,
        wilson_interval(counts.both + counts.baseline_only, n),
        _newcombe_phi(counts),
    )
    test = mcnemar_mid_p if mid_p else mcnemar_exact_p
    p_value = test(counts.baseline_only, counts.candidate_only)
    return Difference(baseline, candidate, low, high, p_value, MCNEMAR_MID_P if mid_p else MCNEMAR)


def unpaired_difference(baseline_wins: int, baseline_n: int, candidate_wins: int, candidate_n: int) -> Difference:
    """Candidate minus baseline over independent episodes: Newcombe's interval and Fisher's exact test."""
    from scipy.stats import fisher_exact

    baseline, candidate = baseline_wins / baseline_n, candidate_wins / candidate_n
    low, high = _square_and_add(
        candidate,
        wilson_interval(candidate_wins, candidate_n),
        baseline,
        wilson_interval(baseline_wins, baseline_n),
        0.0,
    )
    table = [[candidate_wins, candidate_n - candidate_wins], [baseline_wins, baseline_n - baseline_wins]]
    return Difference(baseline, candidate, low, high, float(fisher_exact(table).pvalue), FISHER)


def _square_and_add(
    p1: float, ci1: tuple[float, float], p2: float, ci2: tuple[float, float], phi: float
) -> tuple[float, float]:
    """Newcombe's interval for p1 - p2 from each rate's interval and their correlation phi."""
    (l1, u1), (l2, u2) = ci1, ci2
    d = p1 - p2
    below = (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    above = (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2
    return (max(-1.0, d - math.sqrt(max(0.0, below))), min(1.0, d + math.sqrt(max(0.0, above))))


def _newcombe_phi(c: PairCounts) -> float:
    """Newcombe's estimate of the correlation between the paired outcomes: continuity-corrected when positive,
    zero when a margin is empty."""
    margins = (
        (c.both + c.candidate_only)
        * (c.baseline_only + c.neither)
        * (c.both + c.baseline_only)
        * (c.candidate_only + c.neither)
    )
    if margins == 0:
        return 0.0
    cross = c.both * c.neither - c.baseline_only * c.candidate_only
    if cross > c.n / 2:
        return (cross - c.n / 2) / math.sqrt(margins)
    return cross / math.sqrt(margins) if cross < 0 else 0.0
