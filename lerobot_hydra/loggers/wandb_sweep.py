"""What the W&B run of a sweep (job_type `sweep`) logs: the summary of its combinations, the multi-seed pools and
the comparisons with the baseline and the latency curves, as tables and summary metrics, plus the sweep's plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COMBINATION_COLUMNS = ["combination", "arm", "seed", "num_shards", "n_episodes", "pc_success", "ci95_low", "ci95_high"]
COMPARISON_COLUMNS = [
    "candidate",
    "baseline",
    "paired",
    "unpaired_reason",
    "task_group",
    "task_id",
    "task_name",
    "n_baseline",
    "n_candidate",
    "pc_baseline",
    "pc_candidate",
    "diff_pc",
    "ci95_low",
    "ci95_high",
    "p_value",
    "mde_pc",
    "verdict",
]
SEED_COLUMNS = ["arm", "seed", "n_episodes", "pc_success", "ci95_low", "ci95_high"]
CURVE_COLUMNS = ["curve", "reference", "latency_ms", "n_episodes", "pc_success", "ci95_low", "ci95_high"]
CURVE_COLUMNS += ["diff_pc", "diff_ci95_low", "diff_ci95_high", "p_value", "mean_steps", "mean_held_steps"]


def sweep_payload(wandb: Any, summary: dict[str, Any], images: dict[str, Path]) -> dict[str, Any]:
    payload: dict[str, Any] = dict(sweep_metrics(summary))
    rows = [[r[c] for c in COMBINATION_COLUMNS[:6]] + list(r["ci95_pc_success"]) for r in summary["combinations"]]
    payload["combinations"] = wandb.Table(columns=COMBINATION_COLUMNS, data=rows)
    if summary["comparisons"]:
        payload["comparisons"] = wandb.Table(columns=COMPARISON_COLUMNS, data=comparison_rows(summary))
    if summary["multi_seed"]:
        seeds = [
            [pool["arm"], str(s["seed"]), s["n_episodes"], s["pc_success"], *s["ci95_pc_success"]]
            for pool in summary["multi_seed"]
            for s in [*pool["per_seed"], {"seed": "pooled", **pool["pooled"]}]
        ]
        payload["multi_seed"] = wandb.Table(columns=SEED_COLUMNS, data=seeds)
    if summary.get("latency_curves"):
        payload["latency_curve"] = wandb.Table(columns=CURVE_COLUMNS, data=curve_rows(summary))
    for key, path in images.items():
        payload[f"plots/{key}"] = wandb.Image(str(path))
    return payload


def comparison_rows(summary: dict[str, Any]) -> list[list[Any]]:
    """One row per compared configuration and task, and its overall row (task fields empty)."""
    out = []
    for c in summary["comparisons"]:
        for row in [*c["per_task"], c["overall"]]:
            head = [c["candidate"], c["baseline"], c["paired"], c["unpaired_reason"]]
            task = [row.get("task_group"), row.get("task_id"), row.get("task_name")]
            values = [row[k] for k in ("n_baseline", "n_candidate", "pc_baseline", "pc_candidate", "diff_pc")]
            judged = [row.get("mde_pc"), row.get("verdict")]
            out.append([*head, *task, *values, *row["ci95_diff_pc"], row["p_value"], *judged])
    return out


def curve_rows(summary: dict[str, Any]) -> list[list[Any]]:
    """One row per latency of each latency curve (results/latency_curve.py)."""
    out = []
    for curve in summary["latency_curves"]:
        for p in curve["points"]:
            diff_ci = p["ci95_diff_pc"] or [None, None]
            head = [curve["series"], curve["reference"], p["latency_ms"], p["n_episodes"], p["pc_success"]]
            tail = [p["diff_pc"], *diff_ci, p["p_value"], p["mean_steps"], p["mean_held_steps"]]
            out.append([*head, *p["ci95_pc_success"], *tail])
    return out


def sweep_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """`compare/<candidate>/{diff_pc, ci95_low, ci95_high, p_value}` (overall),
    `multi_seed/<arm or all>/{pc_success, std_pc_success}` (pooled) and
    `latency/<curve or all>/<ms>/{pc_success, diff_pc}` (each latency curve's points)."""
    out: dict[str, float] = {}
    for c in summary["comparisons"]:
        overall = c["overall"]
        out[f"compare/{c['candidate']}/diff_pc"] = overall["diff_pc"]
        out[f"compare/{c['candidate']}/ci95_low"], out[f"compare/{c['candidate']}/ci95_high"] = overall["ci95_diff_pc"]
        out[f"compare/{c['candidate']}/p_value"] = overall["p_value"]
    for pool in summary["multi_seed"]:
        arm = pool["arm"] or "all"
        out[f"multi_seed/{arm}/pc_success"] = pool["pooled"]["pc_success"]
        out[f"multi_seed/{arm}/std_pc_success"] = pool["std_pc_success"]
    for curve in summary.get("latency_curves") or []:
        for p in curve["points"]:
            key = f"latency/{curve['series'] or 'all'}/{p['latency_ms']:g}"
            out[f"{key}/pc_success"] = p["pc_success"]
            if p["diff_pc"] is not None:
                out[f"{key}/diff_pc"] = p["diff_pc"]
    return out
