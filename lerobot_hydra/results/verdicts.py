"""A comparison row's verdict, for reading at a glance and for gating a checkpoint in CI.

- regressed / improved: the difference is significant at level alpha (the row's exact test), in that direction;
- held: not significant, and the episodes could have detected a change of `margin` points (the smallest detectable
  difference, at 80% power, is at most the margin);
- underpowered: not significant, and too few episodes (or pairs that disagree too often) to have detected a change
  of `margin` points: run more episodes before reading "no change" into it (`lerobot-hydra-plan` says how many).

When a gate looks at several rows (every task, every group), their p-values are adjusted with Holm's step-down
method first, so the chance of any false "regressed" among them stays at most alpha.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

REGRESSED, IMPROVED, HELD, UNDERPOWERED = "regressed", "improved", "held", "underpowered"
VERDICTS = (REGRESSED, IMPROVED, HELD, UNDERPOWERED)


@dataclass(frozen=True)
class Criteria:
    alpha: float = 0.05
    margin_pc: float = 10.0  # the change, in points, a "held" must have been able to detect


DEFAULT = Criteria()


def verdict(diff_pc: float, p_value: float, mde_pc: float | None, criteria: Criteria) -> str:
    if p_value < criteria.alpha and diff_pc != 0:
        return REGRESSED if diff_pc < 0 else IMPROVED
    return HELD if mde_pc is not None and mde_pc <= criteria.margin_pc else UNDERPOWERED


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the given order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
