"""The tables that papers and leaderboards take (results.export renders them): a run's results, a comparison of
two result sets, the many-policy table and a sweep's leaderboard."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lerobot_hydra.results.aggregate import Results
from lerobot_hydra.results.export import Table
from lerobot_hydra.results.pairing import row_label
from lerobot_hydra.results.table import table_rows

WILSON = "95% CI: Wilson score interval."
NEWCOMBE = "Differences in points (candidate - baseline), 95% CI: Newcombe's hybrid score interval."


def results_table(results: Results, title: str) -> Table:
    """Each task, group and the overall row: episodes, successes, success (%) and its interval."""
    rows = [
        (r.label, r.summary.n_episodes, r.summary.successes, r.summary.pc_success, r.summary.ci95_pc_success)
        for r in table_rows(results)
    ]
    columns = [("task", "text"), ("episodes", "int"), ("successes", "int"), ("success (%)", "pc"), ("95% CI", "ci")]
    return Table(title, columns, rows, [WILSON], totals=1)


def comparison_table(comparison: Mapping[str, Any], title: str = "") -> Table:
    """Per task, group and overall: both rates, the difference with its interval, the p-value, the Holm-adjusted
    p-value and its mark, the verdict."""
    alpha = comparison.get("criteria", {}).get("alpha", 0.05)
    groups = [
        {**row, "group": g}
        for g, row in comparison.get("per_group", {}).items()
        if sum(t["task_group"] == g for t in comparison["per_task"]) > 1
    ]
    rows = []
    for row in [*comparison["per_task"], *groups, comparison["overall"]]:
        name = f"group {row['group']}" if "group" in row else row_label(row)
        p_adj = row.get("p_adjusted")
        mark = "*" if p_adj is not None and p_adj < alpha else ""
        n = row["n_baseline"] if comparison["paired"] else f"{row['n_baseline']}/{row['n_candidate']}"
        rows.append(
            (name, n, row["pc_baseline"], row["pc_candidate"], row["diff_pc"], row["ci95_diff_pc"])
            + (row["p_value"], p_adj, mark, row.get("verdict", ""))
        )
    columns = [
        ("task", "text"),
        ("pairs" if comparison["paired"] else "episodes", "text"),
        (f"{comparison['baseline']} (%)", "pc"),
        (f"{comparison['candidate']} (%)", "pc"),
        ("difference", "diff"),
        ("95% CI", "ci"),
        ("p", "p"),
        ("p (Holm)", "p"),
        ("", "text"),
        ("verdict", "text"),
    ]
    how = "on paired episodes" if comparison["paired"] else "on independent episodes"
    notes = [
        NEWCOMBE,
        f"p: {comparison['test']} test {how}, two-sided; p (Holm): Holm-adjusted across the tasks, and across the "
        f"groups; * marks p (Holm) < {alpha:g}.",
    ]
    title = title or f"{comparison['candidate']} vs baseline {comparison['baseline']}"
    meta = {"test": comparison["test"], "adjustment": "Holm", "alpha": f"{alpha:g}"}
    return Table(title, columns, rows, notes, totals=1, meta=meta)


def many_table(many: Mapping[str, Any], title: str) -> Table:
    """Each policy's episodes, success and interval, median steps to success, and its letters."""
    rows = [
        (p["name"], p["n_episodes"], p["pc_success"], p["ci95_pc_success"], p["median_steps"], p["letters"])
        for p in many["policies"]
    ]
    columns = [
        ("policy", "text"),
        ("episodes", "int"),
        ("success (%)", "pc"),
        ("95% CI", "ci"),
        ("median steps", "num"),
        ("group", "text"),
    ]
    k = len(many["pairs"])
    notes = [
        WILSON,
        "Median steps: of the successful episodes.",
        f"Policies that share a letter are not significantly different: {many['test']} test on paired episodes for "
        f"each of the {k} pairs, {many['adjustment']}-adjusted, alpha {many['alpha']:g}.",
    ]
    meta = {"test": many["test"], "adjustment": many["adjustment"], "alpha": f"{many['alpha']:g}"}
    return Table(title, columns, rows, notes, meta=meta)


def pairs_table(many: Mapping[str, Any], title: str) -> Table:
    """Every pairwise test of the many-policy table: discordant pairs, p-value, Holm-adjusted p-value."""
    rows = [
        (f"{p['a']} vs {p['b']}", p["n_pairs"], p["a_only"], p["b_only"], p["p_value"], p["p_adjusted"])
        + ("*" if p["significant"] else "",)
        for p in many["pairs"]
    ]
    columns = [
        ("pair", "text"),
        ("pairs", "int"),
        ("first only", "int"),
        ("second only", "int"),
        ("p", "p"),
        (f"p ({many['adjustment']})", "p"),
        ("", "text"),
    ]
    note = (
        f"{many['test']} test on the discordant pairs (first only: the first succeeds and the second fails), "
        f"{many['adjustment']}-adjusted over the {len(rows)} pairs; * marks p ({many['adjustment']}) < "
        f"{many['alpha']:g}."
    )
    return Table(title, columns, rows, [note], meta={"test": many["test"], "adjustment": many["adjustment"]})
