"""The sequential tests' error rates are real: many synthetic runs (no simulator) checked against alpha, and the
paired test's expected episodes against the fixed-size design at the stated power."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from lerobot_hydra.results.power import exact_paired_n
from lerobot_hydra.results.sequential import confidence_sequence, one_policy, paired, rounds, stopping_point
from lerobot_hydra.results.stats import wilson_interval

ALPHA, BETA, ROUND = 0.05, 0.2, 10


def synthetic_pairs(rng: np.random.Generator, n: int, base_only: float, cand_only: float) -> list[tuple[bool, bool]]:
    """(baseline, candidate) outcomes of n episode pairs: discordant with the given chances, else both succeed."""
    u = rng.random(n)
    return [(True, False) if x < base_only else (False, True) if x < base_only + cand_only else (True, True) for x in u]


def run_paired(base_only: float, cand_only: float, n_max: int, runs: int, detect: float, psi: float, seed: int):
    rng = np.random.default_rng(seed)
    outcomes, episodes = Counter(), []
    for _ in range(runs):
        pairs = synthetic_pairs(rng, n_max, base_only, cand_only)
        n, decision = stopping_point(lambda n, p=pairs: paired(p[:n], ALPHA, BETA, detect, psi), n_max, ROUND)
        outcomes[decision.outcome] += 1
        episodes.append(n)
    return outcomes, float(np.mean(episodes))


def test_paired_false_positive_rate_is_at_most_alpha() -> None:
    # No difference: 10% of pairs discordant, half each way; the test planned for 10 points at 15% discordance.
    outcomes, _ = run_paired(0.05, 0.05, n_max=200, runs=1000, detect=0.10, psi=0.15, seed=1)
    assert (outcomes["better"] + outcomes["worse"]) / 1000 <= ALPHA


def test_paired_false_positive_rate_holds_when_the_discordance_is_misjudged() -> None:
    outcomes, _ = run_paired(0.2, 0.2, n_max=200, runs=500, detect=0.10, psi=0.10, seed=2)
    assert (outcomes["better"] + outcomes["worse"]) / 500 <= ALPHA


def test_paired_expected_episodes_are_below_the_fixed_design_at_the_stated_power() -> None:
    # A 10-point drop at 15% discordance: the fixed design is the exact McNemar test's size for 80% power.
    fixed = exact_paired_n(0.15, 0.10)
    outcomes, mean_n = run_paired(0.125, 0.025, n_max=3 * fixed // 2, runs=500, detect=0.10, psi=0.15, seed=3)
    assert outcomes["worse"] / 500 >= 1 - BETA
    assert outcomes["better"] == 0
    assert mean_n < fixed


def test_one_policy_decisions_are_wrong_at_most_alpha_of_the_time() -> None:
    # True rate exactly at the threshold: any 'above' or 'below' is wrong.
    rng = np.random.default_rng(4)
    wrong = 0
    for _ in range(400):
        outcomes = list(rng.random(200) < 0.7)
        _, decision = stopping_point(lambda n, o=outcomes: one_policy(o[:n], ALPHA, None, 0.7), 200, ROUND)
        wrong += decision.outcome in ("above", "below")
    assert wrong / 400 <= ALPHA


def test_precision_stops_once_the_confidence_sequence_is_narrow_enough() -> None:
    outcomes = [k % 2 == 0 for k in range(400)]
    n, decision = stopping_point(lambda n: one_policy(outcomes[:n], ALPHA, 0.10, None), 400, ROUND)
    assert decision.outcome == "precise" and n < 400
    low, high = confidence_sequence(sum(outcomes[:n]), n, ALPHA)
    assert (
        (high - low) / 2
        <= 0.10
        < (lambda c: (c[1] - c[0]) / 2)(confidence_sequence(sum(outcomes[: n - 10]), n - 10, ALPHA))
    )


def test_the_confidence_sequence_is_wider_than_the_fixed_n_interval() -> None:
    # Valid at every round, so wider than the one-look Wilson interval it must contain.
    for s, n in ((9, 10), (50, 100), (0, 30)):
        low, high = confidence_sequence(s, n, ALPHA)
        w_low, w_high = wilson_interval(s, n)
        assert low <= w_low + 1e-9 and high >= w_high - 1e-9


def test_rounds_end_at_the_maximum() -> None:
    assert rounds(25, 10) == [10, 20, 25]
    assert rounds(10, 10) == [10]


@pytest.mark.parametrize("end", [10, 20])
def test_a_paired_decision_reads_only_the_episodes_before_the_round_end(end: int) -> None:
    pairs = [(False, True)] * 30
    assert paired(pairs[:end], ALPHA, BETA, 0.3, 0.4).outcome == "better"
    assert paired([(True, True)] * end, ALPHA, BETA, 0.3, 0.4).stop is False  # no discordant pair decides nothing


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["eval.sequential.stop=soon"], r"^eval.sequential.stop=soon is unknown; use one of: precision, threshold$"),
        (["eval.sequential.stop=threshold"], r"needs eval.sequential.threshold, e.g. threshold=80$"),
        (["eval.sequential.precision=5"], r"precision is set but eval.sequential.stop is null; add .*stop=precision$"),
        (["eval.sequential.stop=precision", "eval.sequential.precision=60"], r"give a half-width in \(0, 50\]$"),
        (["eval.sequential.stop=threshold", "eval.sequential.threshold=100"], "strictly between 0 and 100"),
        (["eval.sequential.stop=precision", "eval.sequential.precision=5", "eval.sequential.round=0"], "round must"),
        (
            ["eval.sequential.stop=precision", "eval.sequential.precision=5", "eval.num_shards=2"],
            "needs hydra/sweeper=sequential .* hydra/sweeper=sequential ...$",
        ),
    ],
)
def test_sequential_settings_are_checked_before_anything_runs(compose, overrides: list[str], message: str) -> None:
    from lerobot_hydra.core.errors import UserError
    from lerobot_hydra.schemas.schema import validate

    with pytest.raises(UserError, match=message):
        validate(compose(*overrides))
