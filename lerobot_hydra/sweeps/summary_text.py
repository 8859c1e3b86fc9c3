"""How a sweep's summary (sweeps/summary.py) reads on the console: the combinations, the multi-seed pools, the
many-policy table, the comparisons with the baseline, the latency curves and the sequential stops."""

from __future__ import annotations

from typing import Any

from lerobot_hydra.results.latency_curve import curve_lines
from lerobot_hydra.results.pairing_text import align, format_comparison
from lerobot_hydra.results.table import rate_text
from lerobot_hydra.sweeps.summary_export import many_lines


def format_sweep_summary(summary: dict[str, Any], title: str) -> str:
    """The combinations table, then each multi-seed pool and each comparison with the baseline."""
    errors = any(row.get("n_errors") for row in summary["combinations"])  # a column only when some errored
    table = [("combination", "shards", "episodes", "success", "95% CI", *(("errors",) if errors else ()))]
    for row in summary["combinations"]:
        table.append(
            (
                row["combination"] or "(default)",
                str(row["num_shards"]),
                str(row["n_episodes"]),
                *rate_text(row["pc_success"], row["ci95_pc_success"]),
                *((str(row.get("n_errors", 0)),) if errors else ()),
            )
        )
    lines = [title, *align(table)]
    for pool in summary["multi_seed"]:
        pooled = pool["pooled"]
        low, high = pooled["ci95_pc_success"]
        lines += [
            "",
            f"{pool['arm'] or 'The sweep'} over {len(pool['seeds'])} seeds: pooled {pooled['pc_success']:.1f}% "
            f"[{low:.1f}, {high:.1f}] over {pooled['n_episodes']} episodes; spread across seeds (std) "
            f"{pool['std_pc_success']:.1f} points",
        ]
        seeds = [("seed", "episodes", "success", "95% CI")]
        seeds += [
            (str(s["seed"]), str(s["n_episodes"]), *rate_text(s["pc_success"], s["ci95_pc_success"]))
            for s in pool["per_seed"]
        ]
        lines += ["  " + line for line in align(seeds)]
    lines += many_lines(summary)
    simulators = [(row["combination"] or "(default)", row.get("simulator")) for row in summary["combinations"]]
    if any(text for _, text in simulators):
        lines += [
            "",
            "Simulators (env.python):",
            *(f"  {name}: {text or 'this interpreter'}" for name, text in simulators),
        ]
    for comparison in summary["comparisons"]:
        lines += ["", format_comparison(comparison)]
        if comparison.get("simulators"):
            sides = comparison["simulators"]
            lines.append(
                f"  simulators: baseline {sides['baseline'] or 'this interpreter'}; "
                f"candidate {sides['candidate'] or 'this interpreter'}"
            )
    lines += curve_lines(summary)
    if summary.get("sequential"):
        lines += [
            "",
            "Sequential stopping (at most {} episodes per task):".format(summary["sequential"][0]["n_episodes_max"]),
        ]
        for combo in summary["sequential"]:
            for task, t in combo["per_task"].items():
                lines.append(f"  {combo['combination']}: {task}: {t['outcome']} after {t['n_episodes']} episodes")
    return "\n".join(lines)
