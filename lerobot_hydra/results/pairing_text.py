"""How a comparison of two result sets (results.pairing) reads: its heading, table rows and lines."""

from __future__ import annotations

from typing import Any

from lerobot_hydra.results.pairing import PAIRED_ON_SEEDS, row_label
from lerobot_hydra.results.stats import MCNEMAR_MID_P


def describe(comparison: dict[str, Any]) -> str:
    """'paired (...)' or 'unpaired: <why>', for headings."""
    if comparison["paired"]:
        n = comparison["overall"]["n_baseline"]
        seeds_only = comparison.get("paired_on") == PAIRED_ON_SEEDS
        what = "tasks and seeds" if seeds_only else "tasks, seeds and initial states"
        return f"paired ({n} episode pairs with the same {what}{_errors_note(comparison)}; {comparison['test']} test)"
    return f"unpaired: {comparison['unpaired_reason']}{_errors_note(comparison)} ({comparison['test']} test)"


def _errors_note(comparison: dict[str, Any]) -> str:
    """What the comparison left out for error episodes (the simulator failed twice), if anything."""
    if comparison.get("error_pairs_dropped"):
        return f"; {comparison['error_pairs_dropped']} pair(s) with an error episode on either side left out"
    if any(comparison.get("error_episodes_left_out", [])):
        base, cand = comparison["error_episodes_left_out"]
        return f"; error episodes left out ({base} of the baseline, {cand} of the candidate)"
    return ""


def comparison_rows(comparison: dict[str, Any]) -> list[tuple[str, ...]]:
    """Table rows (task, episodes, baseline, candidate, difference, 95% CI, p, detectable, verdict): the tasks,
    then the groups (where a group holds more than one task), the overall row last."""
    out = []
    groups = [
        {**row, "group": g}
        for g, row in comparison.get("per_group", {}).items()
        if sum(t["task_group"] == g for t in comparison["per_task"]) > 1
    ]
    for row in [*comparison["per_task"], *groups, comparison["overall"]]:
        name = f"group {row['group']}" if "group" in row else row_label(row)
        n = str(row["n_baseline"]) if comparison["paired"] else f"{row['n_baseline']}/{row['n_candidate']}"
        low, high = row["ci95_diff_pc"]
        out.append(
            (
                name,
                n,
                f"{row['pc_baseline']:.1f}%",
                f"{row['pc_candidate']:.1f}%",
                f"{row['diff_pc']:+.1f}",
                f"[{low:+.1f}, {high:+.1f}]",
                format_p(row["p_value"]),
                "-" if row.get("mde_pc") is None else f"{row['mde_pc']:.0f}",
                row.get("verdict", ""),
            )
        )
    return out


def comparison_header(comparison: dict[str, Any]) -> tuple[str, ...]:
    episodes = "pairs" if comparison["paired"] else "episodes"
    p = "Fisher p"
    if comparison["paired"]:
        p = "McNemar mid-p" if comparison["test"] == MCNEMAR_MID_P else "McNemar p"
    return ("task", episodes, "baseline", "candidate", "difference", "95% CI", p, "detectable", "verdict")


def format_comparison(comparison: dict[str, Any], title: str = "") -> str:
    """A heading and one line per task and overall: rates, difference in points with its interval, p-value."""
    lines = [title or f"{comparison['candidate']} vs baseline {comparison['baseline']}", f"  {describe(comparison)}"]
    lines += align([comparison_header(comparison), *comparison_rows(comparison)], rule_before_last=True)
    if comparison.get("steps"):
        lines.append(f"  {steps_line(comparison['steps'])}")
    if "criteria" in comparison:
        c = comparison["criteria"]
        lines.append(
            f"  verdict: {comparison['verdict']} (alpha {c['alpha']:g}, Holm-adjusted across tasks and across groups;"
            f" 'detectable': the smallest difference in points these episodes detect with 80% power; 'held' needs it"
            f" <= {c['margin_pc']:g})"
        )
    return "\n".join(lines)


def steps_line(steps: dict[str, Any]) -> str:
    """The steps-to-success comparison in one line."""
    medians = ", ".join(f"{side} {_median(steps[side]['median_steps'])}" for side in ("baseline", "candidate"))
    if steps["p_value"] is None:
        test = "no pair differs" if steps["n_both"] else "no episode solved by both"
    else:
        test = f"median difference {steps['median_diff_steps']:+g}, {steps['test']} p {format_p(steps['p_value'])}"
    return f"steps to success: median {medians}; on the {steps['n_both']} episodes both solve: {test}"


def _median(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def align(table: list[tuple[str, ...]], rule_before_last: bool = False) -> list[str]:
    """Columns padded to their widest cell: the first left-aligned, the others right-aligned; a rule under the
    header (and above the last row)."""
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in table
    ]
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    body = [*lines[1:-1], rule, lines[-1]] if rule_before_last and len(lines) > 2 else lines[1:]
    return [lines[0], rule, *body]


def format_p(p: float) -> str:
    return "<0.0001" if p < 1e-4 else f"{p:.4f}".rstrip("0").rstrip(".") if p < 1 else "1"
