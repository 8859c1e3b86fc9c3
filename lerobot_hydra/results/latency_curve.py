"""The latency curve of a sweep over `eval.clock.latency_ms` (docs/timing.md): success against modeled latency, each
point paired against the lowest latency of its curve (the 0 ms arm, on the same seeds).

Arms on the modeled clock whose configurations differ only in `latency_ms` form one curve; a sweep that also varies
another setting (the threshold, the aggregate function, the policy) gives one curve per value of it. Written to
sweep_summary.json as `latency_curves`, and from there to the console, the exports, the report page, the curve plot
and the sweep's W&B/Trackio run.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from lerobot_hydra.core.labels import distinguishing_labels, split_label
from lerobot_hydra.results.aggregate import aggregate
from lerobot_hydra.results.export import Table, console
from lerobot_hydra.results.pairing import ResultSet, compare

LATENCY_KEY = "eval.clock.latency_ms"


class CurveArm(Protocol):
    """A sweep's arm (summary.Arm): its title, label, a member's identity and its pooled episodes."""

    label: str

    @property
    def title(self) -> str: ...

    @property
    def identity(self) -> dict[str, Any]: ...

    def result_set(self) -> ResultSet: ...


def latency_curves(arms: Sequence[CurveArm]) -> list[dict[str, Any]]:
    """One curve per setting held fixed (`series`: the overrides that tell it from the other curves, '' for a
    single curve): its points by latency, each compared with the curve's lowest latency; none when no two arms on
    the modeled clock differ only in latency."""
    series: dict[str, list[CurveArm]] = {}
    for arm in arms:
        clock = arm.identity.get("clock")
        if isinstance(clock, Mapping) and clock.get("mode") == "modeled":
            rest = {k: v for k, v in arm.identity.items() if k not in ("clock", "seed")}
            fixed = {**rest, "clock": {k: v for k, v in clock.items() if k != "latency_ms"}}
            series.setdefault(json.dumps(fixed, sort_keys=True, default=str), []).append(arm)
    curves = [_curve(sorted(m, key=_latency)) for m in series.values() if len({_latency(a) for a in m}) > 1]
    names = distinguishing_labels([c["series"] for c in curves]) if len(curves) > 1 else [""] * len(curves)
    return [{**curve, "series": name} for curve, name in zip(curves, names, strict=True)]


def _latency(arm: CurveArm) -> float:
    return float(arm.identity["clock"]["latency_ms"])


def _curve(members: Sequence[CurveArm]) -> dict[str, Any]:
    base = members[0]
    fixed = [o for o in split_label(base.label) if o.lstrip("+~").split("=", 1)[0] != LATENCY_KEY]
    points = [_point(base, None)] + [_point(arm, compare(base.result_set(), arm.result_set())) for arm in members[1:]]
    return {"series": ",".join(fixed), "reference": base.title, "points": points}


def _point(arm: CurveArm, comparison: Mapping[str, Any] | None) -> dict[str, Any]:
    records = [r for r in arm.result_set().records if not r.errored]
    overall = aggregate(records, 0.0).overall
    held = [r.held_steps for r in records if r.held_steps is not None]
    overall_diff = comparison["overall"] if comparison is not None else {}
    return {
        "latency_ms": _latency(arm),
        "arm": arm.title,
        "n_episodes": overall.n_episodes,
        "pc_success": overall.pc_success,
        "ci95_pc_success": list(overall.ci95_pc_success),
        "inference_ms_p50": overall.inference_ms_p50,
        "mean_steps": statistics.fmean(r.steps for r in records) if records else None,
        "mean_held_steps": statistics.fmean(held) if held else None,
        "paired": comparison["paired"] if comparison is not None else None,
        "diff_pc": overall_diff.get("diff_pc"),
        "ci95_diff_pc": overall_diff.get("ci95_diff_pc"),
        "p_value": overall_diff.get("p_value"),
    }


COLUMNS = (
    ("latency (ms)", "num"),
    ("episodes", "int"),
    ("success (%)", "pc"),
    ("95% CI", "ci"),
    ("difference vs reference", "diff"),
    ("difference 95% CI", "ci"),
    ("p", "p"),
    ("mean steps", "num"),
    ("mean held steps", "num"),
)


def curve_tables(summary: Mapping[str, Any]) -> list[Table]:
    """Each latency curve as a table: a row per latency, the difference against the curve's reference."""
    tables = []
    for curve in summary.get("latency_curves") or []:
        title = f"Latency curve{' (' + curve['series'] + ')' if curve['series'] else ''}"
        note = f"Differences against {curve['reference']}, paired on the same seeds where the episodes pair up."
        tables.append(Table(title, COLUMNS, [_row(p) for p in curve["points"]], [note]))
    return tables


def curve_lines(summary: Mapping[str, Any]) -> list[str]:
    """The latency curves for the console."""
    return [line for table in curve_tables(summary) for line in ("", console(table).rstrip("\n"))]


def curves_csv_table(summary: Mapping[str, Any]) -> Table | None:
    """Every latency curve in one table (a row per curve and latency), for latency_curve.csv; None without one."""
    curves = summary.get("latency_curves") or []
    rows = [(c["series"], c["reference"], *_row(p)) for c in curves for p in c["points"]]
    columns = (("curve", "text"), ("reference", "text"), *COLUMNS)
    return Table("Latency curves", columns, rows) if rows else None


def _row(point: Mapping[str, Any]) -> tuple[Any, ...]:
    p = point
    return (p["latency_ms"], p["n_episodes"], p["pc_success"], p["ci95_pc_success"], p["diff_pc"]) + (
        p["ci95_diff_pc"],
        p["p_value"],
        _round(p["mean_steps"]),
        _round(p["mean_held_steps"]),
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
