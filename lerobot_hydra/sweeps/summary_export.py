"""A sweep's summary as tables for papers and leaderboards (results.export): the many-policy table with its
letters (three or more configurations on the same episodes), else the combinations, then every pairwise test,
every comparison with the baseline and the latency curves. Written beside sweep_summary.json as sweep_summary.md,
.tex and .csv (the CSV holds the first table: one row per configuration), and the latency curves as
latency_curve.csv."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lerobot_hydra.core.durable import write_text_atomic
from lerobot_hydra.core.layout import LATENCY_CSV, SUMMARY_FILE
from lerobot_hydra.results.export import EXPORT_SUFFIXES, Table, console, render_all
from lerobot_hydra.results.export_tables import WILSON, comparison_table, many_table, pairs_table
from lerobot_hydra.results.latency_curve import curve_tables, curves_csv_table
from lerobot_hydra.results.many import many_policies, many_problem
from lerobot_hydra.results.pairing import ResultSet


def many_section(sets: Sequence[ResultSet]) -> dict[str, Any]:
    """sweep_summary.json's `many_policies` (results.many) for three or more configurations, and
    `many_policies_missing`: why there is none (they do not pair up), else None."""
    missing = many_problem(sets)
    return {"many_policies": None if missing else many_policies(sets), "many_policies_missing": missing}


def many_lines(summary: Mapping[str, Any]) -> list[str]:
    """The many-policy table and its pairwise tests for the console, or the line saying what it is missing."""
    if summary.get("many_policies_missing"):
        return ["", f"No many-policy table: {summary['many_policies_missing']}"]
    if not summary.get("many_policies"):
        return []
    return ["", *(console(t).rstrip("\n") for t in sweep_tables(summary)[:2])]


def sweep_tables(summary: Mapping[str, Any]) -> list[Table]:
    many = summary.get("many_policies")
    if many:
        tables = [many_table(many, "Success by configuration"), pairs_table(many, "Pairwise tests")]
    else:
        rows = [
            (r["combination"] or "(default)", r["n_episodes"], r["pc_success"], r["ci95_pc_success"])
            for r in summary["combinations"]
        ]
        columns = [("combination", "text"), ("episodes", "int"), ("success (%)", "pc"), ("95% CI", "ci")]
        tables = [Table("Success by combination", columns, rows, [WILSON])]
    return tables + [comparison_table(c) for c in summary.get("comparisons", [])] + curve_tables(summary)


def write_exports(summary: Mapping[str, Any], sweep_dir: Path) -> list[Path]:
    """sweep_summary.md, .tex and .csv in `sweep_dir`, and latency_curve.csv for a sweep over latency."""
    tables = sweep_tables(summary)
    paths = []
    for fmt, suffix in EXPORT_SUFFIXES.items():
        path = sweep_dir / Path(SUMMARY_FILE).with_suffix(suffix).name
        write_text_atomic(path, render_all(tables, fmt))
        paths.append(path)
    curves = curves_csv_table(summary)
    if curves is not None:
        write_text_atomic(sweep_dir / LATENCY_CSV, render_all([curves], "csv"))
        paths.append(sweep_dir / LATENCY_CSV)
    return paths
