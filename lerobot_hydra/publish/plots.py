"""Figures drawn from typed results: success per task with its 95% interval, success across a sweep, and a
sweep's latency curve.

matplotlib is imported inside the functions and drawn through its Agg canvas (no pyplot, no global
backend), so plotting is safe in any process and thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lerobot_hydra.core.labels import distinguishing_labels
from lerobot_hydra.core.records import EpisodeRecord, TaskKey
from lerobot_hydra.results.aggregate import Results, TaskSummary

LABEL_CHARS = 48
DPI = 110


def _short(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _task_label(task: TaskSummary) -> str:
    name = task.task_name
    return _short(name if name != task.task_group else f"{name} {task.task_id}")


def distinct_labels(labels: Sequence[str]) -> list[str]:
    """The overrides that tell combinations apart ('policy=a'), without those that all of them share."""
    return [d or label or "(default)" for d, label in zip(distinguishing_labels(labels), labels, strict=True)]


def success_by_task(results: Results, path: Path) -> Path:
    """Horizontal bars of each task's success rate with its Wilson interval, tasks grouped and coloured by
    group; the figure grows with the number of tasks so 50 labels stay readable."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    groups = [g.group for g in results.groups]
    rows: list[tuple[float, TaskSummary]] = []  # (y, task), top to bottom
    y = 0.0
    for group in results.groups:
        for task in group.tasks:
            rows.append((y, task))
            y -= 1.0
        y -= 0.6  # gap between groups
    height = 1.6 + 0.26 * (len(rows) + 0.6 * len(groups))
    fig = Figure(figsize=(10.0, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    palette = [f"C{i % 10}" for i in range(len(groups))]
    colour = dict(zip(groups, palette, strict=True))
    ys = [y_pos for y_pos, _ in rows]
    tasks = [t for _, t in rows]
    pcs = [t.pc_success or 0.0 for t in tasks]
    below = [max(0.0, pc - t.ci95_pc_success[0]) for pc, t in zip(pcs, tasks, strict=True)]
    above = [max(0.0, t.ci95_pc_success[1] - pc) for pc, t in zip(pcs, tasks, strict=True)]
    ax.barh(ys, pcs, height=0.72, color=[colour[t.task_group] for t in tasks], alpha=0.85)
    ax.errorbar(pcs, ys, xerr=[below, above], fmt="none", ecolor="black", elinewidth=1, capsize=3)
    for y_pos, pc, t in zip(ys, pcs, tasks, strict=True):
        text = f"{pc:.0f}% ({t.successes}/{t.n_episodes})"
        ax.text(1.01, y_pos, text, transform=ax.get_yaxis_transform(), va="center", fontsize=8)
    ax.set_yticks(ys, [_task_label(t) for t in tasks], fontsize=8)
    ax.set_ylim(min(ys, default=0.0) - 0.7, 0.7)
    ax.set_xlim(0, 100)
    ax.set_xlabel("success rate (%), bars: 95% Wilson interval")
    ax.grid(axis="x", alpha=0.3)
    overall = results.overall
    ax.axvline(overall.pc_success or 0.0, color="black", linestyle="--", linewidth=1)
    low, high = overall.ci95_pc_success
    ax.set_title(
        f"Success by task: overall {overall.pc_success or 0.0:.1f}% [{low:.1f}, {high:.1f}] "
        f"over {overall.n_episodes} episodes",
        fontsize=10,
    )
    if len(groups) > 1:
        handles = [
            Patch(color=colour[g.group], label=f"{_short(g.group, 24)}: {g.pc_success or 0.0:.0f}% (n={g.n_episodes})")
            for g in results.groups
        ]
        fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(groups)), fontsize=8, frameon=False)
    fig.savefig(path)
    return path


def sweep_heatmap(results: Sequence[tuple[str, Results]], path: Path) -> Path:
    """Success of each swept configuration (rows, e.g. 'policy=a') on each task (columns), overall first."""
    import matplotlib
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    columns: list[TaskKey] = []
    names: dict[TaskKey, str] = {}
    for _, result in results:
        for task in result.tasks:
            if task.key not in names:
                columns.append(task.key)
                names[task.key] = _task_label(task)
    values = np.full((len(results), len(columns) + 1), np.nan)
    for r, (_, result) in enumerate(results):
        values[r, 0] = _pc(result.overall.pc_success)
        by_key = {t.key: t.pc_success for t in result.tasks}
        for c, key in enumerate(columns, start=1):
            values[r, c] = _pc(by_key.get(key))
    width = 3.0 + 0.32 * (len(columns) + 1) + 0.06 * min(60, max((len(label) for label, _ in results), default=0))
    height = 1.8 + 0.4 * len(results) + 0.055 * max((len(n) for n in names.values()), default=0)
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="lightgrey")
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0, vmax=100, aspect="auto")
    labels = distinct_labels([label for label, _ in results])
    ax.set_yticks(range(len(results)), [_short(label, 60) for label in labels], fontsize=8)
    ax.set_xticks(range(len(columns) + 1), ["overall", *(names[k] for k in columns)], rotation=90, fontsize=7)
    ax.axvline(0.5, color="white", linewidth=2)
    if values.size <= 600:
        for (r, c), value in np.ndenumerate(values):
            if not np.isnan(value):
                shade = "white" if value < 60 else "black"
                ax.text(c, r, f"{value:.0f}", ha="center", va="center", fontsize=6, color=shade)
    fig.colorbar(image, ax=ax, label="success rate (%)", fraction=0.03, pad=0.01)
    ax.set_title("Success across the sweep", fontsize=10)
    fig.savefig(path)
    return path


def _pc(pc: float | None) -> float:
    return float("nan") if pc is None else pc


def comparison_forest(comparisons: Sequence[dict[str, Any]], baseline: str, path: Path) -> Path:
    """Each configuration's difference from the baseline (points) with its 95% interval: its overall line, then
    one per task; paired comparisons in blue, unpaired in orange."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from lerobot_hydra.results.pairing import row_label
    from lerobot_hydra.results.pairing_text import format_p

    rows: list[tuple[float, str, dict[str, Any], bool, bool]] = []  # (y, label, row, paired, is overall)
    y = 0.0
    for comparison in comparisons:
        tasks = comparison["per_task"] if len(comparison["per_task"]) > 1 else []
        rows.append((y, _short(comparison["candidate"], 60), comparison["overall"], comparison["paired"], True))
        y -= 1.0
        for task in tasks:
            rows.append((y, "   " + _short(row_label(task)), task, comparison["paired"], False))
            y -= 1.0
        y -= 0.5
    fig = Figure(figsize=(10.0, 1.6 + 0.3 * len(rows)), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for y_pos, _, row, paired, overall in rows:
        colour = "C0" if paired else "C1"
        low, high = row["ci95_diff_pc"]
        ax.plot([low, high], [y_pos, y_pos], color=colour, linewidth=2.5 if overall else 1.2)
        ax.plot([row["diff_pc"]], [y_pos], marker="D" if overall else "o", color=colour, markersize=6 if overall else 4)
        text = f"{row['diff_pc']:+.0f} [{low:+.0f}, {high:+.0f}] p={format_p(row['p_value'])}"
        ax.text(1.01, y_pos, text, transform=ax.get_yaxis_transform(), va="center", fontsize=8)
    ys = [r[0] for r in rows]
    ax.set_yticks(ys, [r[1] for r in rows], fontsize=8)
    for tick, (*_, overall) in zip(ax.get_yticklabels(), rows, strict=True):
        tick.set_fontweight("bold" if overall else "normal")
    ax.axvline(0, color="black", linewidth=1)
    ax.set_xlim(-105, 105)
    ax.set_ylim(min(ys, default=0.0) - 0.7, 0.7)
    ax.set_xlabel("success difference from the baseline (points); bars: 95% interval; blue paired, orange unpaired")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"Compared with the baseline {_short(baseline, 60)}", fontsize=10)
    fig.savefig(path)
    return path


def steps_cdf(named: Sequence[tuple[str, Sequence[EpisodeRecord]]], path: Path) -> Path:
    """For each (name, episodes): the empirical CDF of the steps its successful episodes took (results.steps), one
    step line per policy; a curve further left succeeds sooner."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from lerobot_hydra.results.steps import ecdf_points

    fig = Figure(figsize=(7.0, 3.6), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    labels = distinct_labels([name for name, _ in named]) if len(named) > 1 else [name for name, _ in named]
    for label, (_, records) in zip(labels, named, strict=True):
        xs, ps = ecdf_points(records)
        if xs:
            wins = sum(r.success for r in records)
            ax.step([0.0, *xs], [0.0, *ps], where="post", label=f"{_short(label, 40)} ({wins} successes)")
    ax.set_xlabel("steps to success")
    ax.set_ylabel("share of successful episodes")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Steps to success (successful episodes only)", fontsize=10)
    fig.savefig(path)
    return path


def latency_curve(curves: Sequence[dict[str, Any]], path: Path) -> Path:
    """Each latency curve (results/latency_curve.py): success against modeled latency with its Wilson interval
    (left), and the paired difference from the curve's reference latency with its 95% interval (right)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11.0, 4.0), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    rate, diff = fig.subplots(1, 2, sharex=True)
    for i, curve in enumerate(curves):
        points, colour = curve["points"], f"C{i % 10}"
        xs = [p["latency_ms"] for p in points]
        pcs = [p["pc_success"] or 0.0 for p in points]
        errs = [[pc - p["ci95_pc_success"][0] for pc, p in zip(pcs, points, strict=True)]]
        errs.append([p["ci95_pc_success"][1] - pc for pc, p in zip(pcs, points, strict=True)])
        label = _short(curve["series"] or "success", 40)
        rate.errorbar(xs, pcs, yerr=errs, marker="o", capsize=3, color=colour, label=label)
        # The reference sits at 0 by definition; the others carry their paired interval.
        diffs = [p["diff_pc"] or 0.0 for p in points]
        low = [d - (p["ci95_diff_pc"] or [d])[0] for d, p in zip(diffs, points, strict=True)]
        high = [(p["ci95_diff_pc"] or [d, d])[1] - d for d, p in zip(diffs, points, strict=True)]
        diff.errorbar(xs, diffs, yerr=[low, high], marker="D", capsize=3, color=colour, label=label)
    rate.set_ylim(0, 102)
    rate.set_xlabel("modeled inference latency (ms)")
    rate.set_ylabel("success rate (%), bars: 95% Wilson interval")
    if len(curves) > 1:
        rate.legend(fontsize=8, loc="lower left")
    diff.axhline(0, color="black", linewidth=1)
    diff.set_ylim(-105, 105)
    diff.set_xlabel("modeled inference latency (ms)")
    diff.set_ylabel("difference from the reference (points), 95% CI")
    for ax in (rate, diff):
        ax.grid(alpha=0.3)
    reference = curves[0]["reference"] if curves else ""
    fig.suptitle(f"Success against latency; differences paired against {_short(reference, 50)}", fontsize=10)
    fig.savefig(path)
    return path
