"""Planning: sample sizes against their closed forms worked by hand, the exact McNemar power against a simulation of
the exact test, the planner CLI, and the smallest detectable difference as the inverse of the sample size."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom, binomtest, fisher_exact

from lerobot_hydra.app.plan import main as plan_main
from lerobot_hydra.results.power import (
    detectable_paired,
    detectable_unpaired,
    exact_paired_n,
    exact_unpaired_n,
    fisher_power,
    mcnemar_power,
    paired_n,
    unpaired_n,
)


def test_sample_sizes_match_the_closed_forms() -> None:
    # Fleiss, 90% vs 85%: [1.95996 sqrt(2 .875 .125) + 0.84162 sqrt(.09 + .1275)]^2 / .05^2 = 685.6 -> 686.
    assert unpaired_n(0.9, 0.05) == 686
    # 50% vs 60% (a rise): [1.95996 sqrt(2 .55 .45) + 0.84162 sqrt(.25 + .24)]^2 / .1^2 = 387.3 -> 388.
    assert unpaired_n(0.5, -0.1) == 388
    # Connor, discordance 10%, difference 5 points: [1.95996 sqrt(.1) + 0.84162 sqrt(.0975)]^2 / .0025 = 311.6.
    assert paired_n(0.1, 0.05) == 312
    with pytest.raises(ValueError):
        paired_n(0.03, 0.05)  # a 5-point difference needs at least 5% discordant pairs


def test_exact_mcnemar_power_matches_a_simulation_of_the_exact_test() -> None:
    n, psi, d = 60, 0.2, 0.12
    rng = np.random.default_rng(0)
    share = (psi + d) / (2 * psi)
    runs = 2000
    discordant = rng.binomial(n, psi, size=runs)
    for_candidate = rng.binomial(discordant, share)
    pairs = zip(for_candidate, discordant, strict=True)
    rejected = sum(m > 0 and binomtest(int(k), int(m), 0.5).pvalue <= 0.05 for k, m in pairs)
    assert mcnemar_power(n, psi, d) == pytest.approx(rejected / runs, abs=0.03)


def test_exact_fisher_power_sums_scipys_test_over_every_outcome() -> None:
    for n, p, d in [(12, 0.7, 0.4), (9, 0.5, -0.3), (20, 0.9, 0.5)]:
        outcomes = [(a, b) for a in range(n + 1) for b in range(n + 1)]
        rejected = [(a, b) for a, b in outcomes if fisher_exact([[a, n - a], [b, n - b]]).pvalue <= 0.05]
        expected = sum(binom.pmf(a, n, p) * binom.pmf(b, n, p - d) for a, b in rejected)
        assert fisher_power(n, p, d) == pytest.approx(expected, rel=1e-9)


def _simulated_fisher_power(n: int, p: float, q: float, runs: int = 4000) -> float:
    """Fisher's exact test (scipy) on `runs` simulated pairs of runs of `n` episodes each."""
    rng = np.random.default_rng(1)
    tables: dict[tuple[int, int], int] = {}
    for a, b in zip(rng.binomial(n, p, runs), rng.binomial(n, q, runs), strict=True):
        tables[(int(a), int(b))] = tables.get((int(a), int(b)), 0) + 1
    rejected = [k for (a, b), k in tables.items() if fisher_exact([[a, n - a], [b, n - b]]).pvalue <= 0.05]
    return sum(rejected) / runs


def test_fleiss_falls_short_of_fishers_exact_power_and_the_exact_size_reaches_it() -> None:
    # 90% vs 85%: Fleiss's 686 episodes give Fisher's exact test power 0.78; 721 give 0.80, 720 do not.
    assert fisher_power(686, 0.9, 0.05) == pytest.approx(0.7797, abs=1e-4)
    assert fisher_power(720, 0.9, 0.05) < 0.8 <= fisher_power(721, 0.9, 0.05)
    for n in (686, 721):
        assert _simulated_fisher_power(n, 0.9, 0.85) == pytest.approx(fisher_power(n, 0.9, 0.05), abs=0.02)
    n = exact_unpaired_n(0.5, -0.2)  # 50% vs 70%: Fleiss says 91
    assert n >= unpaired_n(0.5, -0.2) and fisher_power(n, 0.5, -0.2) >= 0.8 > fisher_power(n - 1, 0.5, -0.2)


def test_the_exact_paired_size_is_the_fewest_pairs_with_the_power() -> None:
    n = exact_paired_n(0.1, 0.05)
    assert n >= paired_n(0.1, 0.05)  # the exact test is conservative
    assert mcnemar_power(n, 0.1, 0.05) >= 0.8 > mcnemar_power(n - 1, 0.1, 0.05)


def test_the_detectable_difference_inverts_the_sample_size() -> None:
    d = detectable_unpaired(0.9, 100, 100)
    assert d is not None and unpaired_n(0.9, d) <= 100 < unpaired_n(0.9, d - 0.002)
    d = detectable_paired(100, 0.3)
    assert d is not None and paired_n(0.3, d) <= 100 < paired_n(0.3, d - 0.002)
    assert detectable_unpaired(0.5, 5, 5) is None  # five episodes each cannot detect even a drop to 0


def test_plan_prints_unpaired_and_paired_sizes(capsys) -> None:
    assert plan_main(["--baseline", "90", "--drop", "5", "--discordance", "10"]) == 0
    out = capsys.readouterr().out
    assert "721 episodes per task and policy (exact Fisher test; Fleiss's approximation: 686)" in out
    assert f"{exact_paired_n(0.1, 0.05)} episode pairs per task" in out and "approximation: 312" in out
    assert plan_main(["--baseline", "90", "--drop", "95"]) == 2
    assert "give 0 < baseline <= 100" in capsys.readouterr().err


def test_plan_says_why_a_paired_size_exceeds_the_unpaired_one(capsys) -> None:
    # 40% of pairs disagree, above the 22% of independent episodes at 90% vs 85%: pairing costs episodes.
    assert plan_main(["--baseline", "90", "--drop", "5", "--discordance", "40"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert exact_paired_n(0.4, 0.05) > 721 and lines[2].startswith("  paired, discordance 40%:")
    assert lines[3].startswith("    more than unpaired: 40% of pairs disagree, more than the 22% independent episodes")
    assert plan_main(["--baseline", "90", "--drop", "5", "--discordance", "10"]) == 0
    assert "more than unpaired" not in capsys.readouterr().out


def test_plan_measures_the_discordance_on_two_earlier_paired_runs(tmp_path: Path, capsys) -> None:
    from lerobot_hydra.core.records import EpisodeRecord
    from lerobot_hydra.results.aggregate import aggregate
    from lerobot_hydra.results.eval_info import to_eval_info

    def write(name: str, wins: list[bool]) -> Path:
        records = [
            EpisodeRecord("reach-v3", 0, "reach-v3", "", k, 1000 + k, w, 0.0, 0.0, 5, 0.1) for k, w in enumerate(wins)
        ]
        (tmp_path / name).mkdir()
        (tmp_path / name / "eval_info.json").write_text(json.dumps(to_eval_info(aggregate(records, 1.0))))
        return tmp_path / name

    # 20 pairs, 4 discordant (episodes 0-3): 20%.
    old = write("old", [True] * 2 + [False] * 2 + [True] * 16)
    new = write("new", [False] * 2 + [True] * 2 + [True] * 16)
    assert plan_main(["--baseline", "90", "--drop", "10", "--discordance-from", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "discordance 20% measured on 20 pairs" in out.replace("20.0%", "20%")
    assert f"{exact_paired_n(0.2, 0.1)} episode pairs per task" in out
