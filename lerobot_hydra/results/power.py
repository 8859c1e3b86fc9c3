"""Power and sample size for success-rate comparisons, from scipy's normal and binomial distributions.

- Unpaired (two independent sets of episodes, Fisher's test): Fleiss's sample size for two proportions (Fleiss,
  Levin & Paik, *Statistical Methods for Rates and Proportions*, 3rd ed., eq. 4.14, without continuity correction):
  n = [z_{a/2} sqrt(2 pbar qbar) + z_b sqrt(p1 q1 + p2 q2)]^2 / d^2 episodes per policy.
- Paired (the same episodes under both policies, McNemar's test): Connor's sample size (Connor 1987, Biometrics 43,
  207-211): n = [z_{a/2} sqrt(psi) + z_b sqrt(psi - d^2)]^2 / d^2 pairs, where psi is the chance that a pair is
  discordant (one policy succeeds, the other fails) and d the difference of the two rates. Pairing pays when psi is
  small: two policies that fail on the same hard initial states need far fewer episodes than independent runs.
- `mcnemar_power`: the exact power of the exact McNemar test at n pairs (a sum over binomial outcomes), the check of
  Connor's approximation at the planned n.
- `fisher_power`: the exact power of Fisher's exact test with n episodes per policy (a sum over every pair of
  binomial outcomes of the conditional test's rejections); Fleiss's n falls short of it (686 episodes at 90% vs 85%
  have power 0.78), so `exact_unpaired_n` searches upwards from it as `exact_paired_n` does from Connor's.
- The smallest detectable difference (`detectable_*`): the smallest d these formulas detect with n episodes.
"""

from __future__ import annotations

import math

ALPHA, POWER = 0.05, 0.8


def _z(alpha: float, power: float) -> tuple[float, float]:
    from scipy.stats import norm

    return float(norm.ppf(1 - alpha / 2)), float(norm.ppf(power))


def unpaired_n(p: float, d: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Episodes per policy to detect a change of `d` from a rate `p` (fractions; p - d must stay in [0, 1])."""
    p2 = p - d
    if not (0 <= p <= 1 and 0 <= p2 <= 1) or d == 0:
        raise ValueError(f"a change of {d:g} from {p:g} is not a change between two rates in [0, 1]")
    za, zb = _z(alpha, power)
    pbar = (p + p2) / 2
    root = za * math.sqrt(2 * pbar * (1 - pbar)) + zb * math.sqrt(p * (1 - p) + p2 * (1 - p2))
    return math.ceil(root**2 / d**2)


def paired_n(discordance: float, d: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Episode pairs to detect a difference `d` of paired rates when a pair is discordant with chance
    `discordance` (which must be at least |d|: every pair that makes the difference is discordant)."""
    d = abs(d)
    if d == 0 or not d <= discordance <= 1:
        raise ValueError(f"a difference of {d:g} needs a discordance between {d:g} and 1 (got {discordance:g})")
    za, zb = _z(alpha, power)
    return math.ceil((za * math.sqrt(discordance) + zb * math.sqrt(discordance - d * d)) ** 2 / d**2)


def mcnemar_power(n: int, discordance: float, d: float, alpha: float = ALPHA) -> float:
    """The exact power of the two-sided exact McNemar test with `n` pairs: the discordant pairs are
    Binomial(n, discordance), and each goes the candidate's way with chance (discordance + d) / (2 discordance)."""
    import numpy as np
    from scipy.stats import binom

    if discordance <= 0 or n < 1:
        return 0.0
    share = (discordance + d) / (2 * discordance)
    m = np.arange(1, n + 1)
    # The exact test rejects when min(k, m - k) <= c, c the largest with 2 P(Bin(m, 1/2) <= c) <= alpha.
    c = binom.ppf(alpha / 2, m, 0.5)
    c = np.where(2 * binom.cdf(c, m, 0.5) > alpha, c - 1, c)
    reject = np.where(c >= 0, binom.cdf(c, m, share) + binom.sf(m - c - 1, m, share), 0.0)
    return float(np.sum(binom.pmf(m, n, discordance) * reject))


def exact_paired_n(discordance: float, d: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """The fewest pairs (searched upwards from Connor's approximation) at which the exact McNemar test has
    `power`; the exact test is conservative, so this is a little above `paired_n`."""
    n = paired_n(discordance, d, alpha, power)
    step = max(1, n // 20)
    while mcnemar_power(n, discordance, d, alpha) < power:
        n += step
    while step > 1 and n > 1 and mcnemar_power(n - 1, discordance, d, alpha) >= power:
        n -= 1
    return n


def fisher_power(n: int, p: float, d: float, alpha: float = ALPHA) -> float:
    """The exact power of the two-sided Fisher exact test with `n` episodes per policy at rates `p` and `p - d`.
    Given t successes in all, the first policy's count is hypergeometric; the test rejects the counts whose p-value
    (the chance of every count no likelier than it, scipy's rule with its 1e-7 relative tolerance) is <= alpha."""
    import numpy as np
    from scipy.special import gammaln
    from scipy.stats import binom

    counts = np.arange(n + 1)
    totals = np.arange(2 * n + 1)[:, None]  # one row per total number of successes t
    log_choose = gammaln(n + 1) - gammaln(counts + 1) - gammaln(n - counts + 1)
    others = totals - counts  # the second policy's count, for the first's count in each column
    valid = (others >= 0) & (others <= n)
    others = np.clip(others, 0, n)
    log_total = gammaln(2 * n + 1) - gammaln(totals + 1) - gammaln(2 * n - totals + 1)
    null = np.where(valid, np.exp(log_choose[counts] + log_choose[others] - log_total), 0.0)
    # Each row's p-values at once: rows sorted and offset by 2 per row, so one search finds a count's place in its row.
    offset = 2.0 * totals
    ordered = np.sort(null, axis=1)
    below = np.searchsorted((ordered + offset).ravel(), (null * (1 + 1e-7) + offset).ravel(), side="right") - 1
    p_values = np.cumsum(ordered, axis=1).ravel()[below].reshape(null.shape)
    chance = binom.pmf(counts, n, p)[None, :] * binom.pmf(others, n, p - d)
    return float(np.sum(np.where(valid & (p_values <= alpha), chance, 0.0)))


def exact_unpaired_n(p: float, d: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Episodes per policy at which Fisher's exact test reaches `power` and one fewer does not: searched upwards
    from Fleiss's approximation, then bisected (the exact power is not quite monotone in n)."""
    low = unpaired_n(p, d, alpha, power) - 1
    step = max(1, (low + 1) // 40)
    high = low + step
    while fisher_power(high, p, d, alpha) < power:
        low, high = high, high + step
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if fisher_power(mid, p, d, alpha) >= power else (mid, high)
    return high


def detectable_unpaired(p: float, n_a: int, n_b: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest change (fraction) from a rate `p`, towards the farther end of [0, 1], that `n_a` and `n_b`
    independent episodes detect; None when not even a change to 0 or 1 would be."""
    n = 2 / (1 / n_a + 1 / n_b)  # equal groups of the harmonic mean have about the same power
    sign = 1 if p >= 0.5 else -1
    room = p if sign > 0 else 1 - p
    return _smallest(lambda d: unpaired_n(p, sign * d, alpha, power) <= n, room)


def detectable_paired(n: int, discordance: float, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest difference (fraction) `n` pairs detect, with a pair discordant with chance `discordance`, or
    with chance d where fewer pairs than that were discordant (no discordance left over: the most favourable case)."""
    return _smallest(lambda d: paired_n(max(discordance, d), d, alpha, power) <= n, 1.0)


def _smallest(detects, upper: float) -> float | None:  # type: ignore[no-untyped-def]
    """The smallest d in (0, upper] with detects(d), to 1e-4, assuming detects is monotone; None if none is."""
    if upper <= 0 or not detects(upper):
        return None
    low, high = 0.0, upper
    while high - low > 1e-4:
        mid = (low + high) / 2
        low, high = (low, mid) if detects(mid) else (mid, high)
    return high
