"""`lerobot-hydra-plan`: how many episodes per task detect a drop of D points from a baseline success rate of P%
with power 1-beta at level alpha (results.power), before a run spends them.

    lerobot-hydra-plan --baseline 90 --drop 5                    # unpaired, and paired for a few discordances
    lerobot-hydra-plan --baseline 90 --drop 5 --discordance 8    # paired: 8% of episode pairs disagree
    lerobot-hydra-plan --baseline 90 --drop 5 --discordance-from runs/old runs/new   # measured on earlier runs

Unpaired: two independent sets of episodes (another seed, another benchmark version; Fisher's test). Paired: both
policies on the same tasks, seeds and initial states (a sweep over policies; McNemar's test); what it needs depends
on the discordance, the share of episode pairs where exactly one policy succeeds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.results.power import exact_paired_n, exact_unpaired_n, paired_n, unpaired_n


def measured_discordance(a: Path, b: Path) -> tuple[float, int]:
    """The share of discordant pairs between two earlier runs that pair up, and the number of pairs."""
    from lerobot_hydra.sweeps.compare import compare_dirs

    comparison = compare_dirs(a, b, require_paired=True)
    overall = comparison["overall"]
    n = overall["n_baseline"]
    return (overall["n_baseline_only"] + overall["n_candidate_only"]) / n, n


def plan_lines(p: float, d: float, alpha: float, power: float, discordances: list[float]) -> list[str]:
    """The plan, as printed lines (rates and differences in fractions)."""
    unpaired = exact_unpaired_n(p, d, alpha, power)
    lines = [
        f"Detect a drop of {100 * d:g} points from {100 * p:g}% with {100 * power:g}% power at alpha {alpha:g}"
        " (two-sided):",
        f"  unpaired (independent episodes, Fisher's test): {unpaired} episodes per task "
        f"and policy (exact Fisher test; Fleiss's approximation: {unpaired_n(p, d, alpha, power)})",
    ]
    for psi in discordances:
        if psi < d:
            lines.append(f"  paired, discordance {100 * psi:g}%: impossible (a drop of d needs at least d discordant)")
            continue
        paired = exact_paired_n(psi, d, alpha, power)
        lines.append(
            f"  paired, discordance {100 * psi:g}%: {paired} episode pairs per task "
            f"(exact McNemar test; Connor's approximation: {paired_n(psi, d, alpha, power)})"
        )
        if paired > unpaired and psi > independent_discordance(p, d) + 1e-6:
            lines.append(
                f"    more than unpaired: {100 * psi:g}% of pairs disagree, more than the "
                f"{100 * independent_discordance(p, d):.3g}% independent episodes at these rates would give (the two "
                "policies fail on different episodes), so pairing costs episodes here: plan the unpaired size"
            )
    return lines


def independent_discordance(p: float, d: float) -> float:
    """The share of discordant pairs when the two policies' episodes are independent (rates p and p - d)."""
    return p * (1 - (p - d)) + (p - d) * (1 - p)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lerobot-hydra-plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=float, required=True, metavar="PC", help="baseline success rate, percent")
    parser.add_argument("--drop", type=float, required=True, metavar="POINTS", help="the drop to detect, in points")
    parser.add_argument("--power", type=float, default=0.8, help="chance of detecting it (0.8)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level, two-sided (0.05)")
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--discordance", type=float, metavar="PC", help="percent of episode pairs that disagree")
    given.add_argument(
        "--discordance-from", nargs=2, type=Path, metavar=("A", "B"), help="measure it on two earlier paired runs"
    )
    args = parser.parse_args(argv)
    try:
        p, d = args.baseline / 100, args.drop / 100
        if not (0 < p <= 1 and 0 < d <= p and 0 < args.power < 1 and 0 < args.alpha < 1):
            raise UserError(
                f"--baseline {args.baseline:g} --drop {args.drop:g} --power {args.power:g} --alpha {args.alpha:g}: "
                "give 0 < baseline <= 100, 0 < drop <= baseline (points), 0 < power < 1, 0 < alpha < 1"
            )
        notes = []
        if args.discordance_from is not None:
            psi, pairs = measured_discordance(*args.discordance_from)
            discordances = [max(psi, 1e-9)]
            notes.append(f"  (discordance {100 * psi:.1f}% measured on {pairs} pairs of the earlier runs)")
        elif args.discordance is not None:
            discordances = [args.discordance / 100]
        else:
            independent = independent_discordance(p, d)
            discordances = sorted({min(1.0, k * d) for k in (1, 2, 4)} | {round(independent, 4)})
            notes.append("  (paired: assumed discordances; the last is what independent episodes would give)")
        print("\n".join([*plan_lines(p, d, args.alpha, args.power, discordances), *notes]))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
