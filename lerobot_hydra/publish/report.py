"""report.html: one self-contained page beside each eval_info.json (a run, a merged combination) and in the dir of
a sweep of several combinations, to open from disk in any browser, without a server or network.

A run's page: the results table with 95% intervals, the success plot, the first filmed episode of each task playing
inline, and the provenance when eval_info has one. A sweep's page: the combinations (linked to their own pages),
the multi-seed pools, the comparisons with the baseline, the heatmap, the forest plot and the latency curves. Plots
are embedded as base64 PNG; videos are referenced by their relative path (they sit beside the page) rather than
embedded, which would double their size. No external script, style sheet or font.
"""

from __future__ import annotations

import base64
import html
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lerobot_hydra.core.durable import write_text_atomic
from lerobot_hydra.core.layout import REPORT_FILE
from lerobot_hydra.publish.report_curves import curve_section
from lerobot_hydra.results.aggregate import Results, Summary
from lerobot_hydra.results.table import ci_text, pc_text, table_rows

_IMAGE_HEADINGS = {
    "success_by_task": "Success by task",
    "comparison_forest": "Differences from the baseline",
    "sweep_heatmap": "Success across the sweep",
    "steps_cdf": "Steps to success",
    "latency_curve": "Success against latency",
}

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "DejaVu Sans", sans-serif; margin: 24px; color: #1d1d1f; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; } h3 { font-size: 15px; }
p.sub { color: #555; margin: 0 0 16px; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: right; white-space: nowrap; }
th { background: #f2f2f5; } td:first-child, th:first-child { text-align: left; }
tr.group td { font-weight: 600; background: #fafafa; } tr.overall td { font-weight: 700; border-top: 2px solid #888; }
td.kv { text-align: left; white-space: normal; word-break: break-all; font-family: monospace; }
img { max-width: 100%; border: 1px solid #eee; }
.videos { display: flex; flex-wrap: wrap; gap: 14px; }
figure { margin: 0; } figcaption { font-size: 12px; color: #444; max-width: 320px; }
video { width: 320px; background: #000; }
.ok { color: #17803d; } .fail { color: #b3261e; }
"""

# Marks each video with data-state="loaded" once its first frame is decoded ("error" when it cannot play), and each
# image once drawn, so that a headless browser (the tests) can tell that everything on the page shows.
_SCRIPT = """
const mark = (el, state) => { el.dataset.state = state; };
for (const v of document.querySelectorAll("video")) {
  v.addEventListener("loadeddata", () => mark(v, "loaded"));
  v.addEventListener("error", () => mark(v, "error"));
  if (v.readyState >= 2) mark(v, "loaded");
}
for (const img of document.querySelectorAll("img")) {
  const done = () => mark(img, img.naturalWidth > 0 ? "loaded" : "error");
  if (img.complete) done(); else { img.addEventListener("load", done); img.addEventListener("error", done); }
}
"""


def run_report(results: Results, out_dir: Path, title: str, images: Mapping[str, Path]) -> Path:
    """Write `out_dir/report.html` for `results` (video paths relative to `out_dir`)."""
    overall = results.overall
    parts = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="sub">{_e(str(out_dir))}: {_rate(overall)} over {overall.n_episodes} episodes, '
        f"{results.eval_s:.0f} s{_errors(overall.n_errors)}</p>",
        *_images(images, ("success_by_task", "steps_cdf")),
        "<h2>Results</h2>",
        _results_table(results),
        *_videos(results, out_dir),
    ]
    if results.sequential:
        parts += _sequential(results.sequential)
    if results.provenance:
        parts += ["<h2>Provenance</h2>", _table(("key", "value"), _flatten(results.provenance), kv=True)]
    return _write(out_dir / REPORT_FILE, title, parts)


def _sequential(sequential: Mapping[str, Any]) -> list[str]:
    """Why and when each task stopped (eval.sequential)."""
    settings = sequential["settings"]
    given = ", ".join(f"{k}={v}" for k, v in settings.items() if v is not None)
    rows = [(task, str(t["n_episodes"]), t["outcome"], t["why"]) for task, t in sequential["per_task"].items()]
    return [
        "<h2>Sequential stopping</h2>",
        f'<p class="sub">eval.sequential: {_e(given)}; at most {sequential["n_episodes_max"]} episodes per task</p>',
        _table(("task", "episodes", "stopped as", "why"), rows),
    ]


def sweep_report(summary: dict[str, Any], sweep_dir: Path, images: Mapping[str, Path]) -> Path:
    """Write `sweep_dir/report.html` for the content of sweep_summary.json."""
    from lerobot_hydra.results.pairing_text import comparison_header, comparison_rows, describe

    rows = []
    errors = any(row.get("n_errors") for row in summary["combinations"])  # a column only when some errored
    for row in summary["combinations"]:
        page = (sweep_dir / row["eval_info"]).parent / REPORT_FILE
        name = _e(row["combination"] or "(default)")
        if page.is_file():
            name = f'<a href="{_e(_href(page, sweep_dir))}">{name}</a>'
        cells = [name, row["num_shards"], row["n_episodes"], pc_text(row["pc_success"]), _ci(row)]
        rows.append(cells + ([row.get("n_errors", 0)] if errors else []))
    parts = [
        f"<h1>Sweep {_e(sweep_dir.name)}</h1>",
        f'<p class="sub">{_e(str(sweep_dir))}: {len(rows)} combinations</p>',
        *_images(images, ("latency_curve", "comparison_forest", "sweep_heatmap", "steps_cdf")),
        *curve_section(summary),
        *_many(summary),
        "<h2>Combinations</h2>",
        _table(
            ("combination", "shards", "episodes", "success", "95% CI", *(("error episodes",) if errors else ())),
            rows,
            escaped=True,
        ),
    ]
    for pool in summary.get("multi_seed", []):
        pooled = pool["pooled"]
        parts.append(f"<h2>{_e(pool['arm'] or 'The sweep')} over {len(pool['seeds'])} seeds</h2>")
        parts.append(
            f'<p class="sub">pooled {pc_text(pooled["pc_success"])} {_ci(pooled)} over {pooled["n_episodes"]} '
            "episodes; spread across seeds (standard deviation)"
            f" {pool['std_pc_success']:.1f} points</p>"
        )
        seed_rows = [[s["seed"], s["n_episodes"], f"{s['pc_success']:.1f}%", _ci(s)] for s in pool["per_seed"]]
        seed_rows.append(["pooled", pooled["n_episodes"], f"{pooled['pc_success']:.1f}%", _ci(pooled)])
        parts.append(_table(("seed", "episodes", "success", "95% CI"), seed_rows, last_is_total=True))
    if summary.get("comparisons"):
        parts.append(f"<h2>Compared with the baseline {_e(summary['baseline'])}</h2>")
    for comparison in summary.get("comparisons", []):
        parts.append(f"<h3>{_e(comparison['candidate'])} vs {_e(comparison['baseline'])}</h3>")
        parts.append(f'<p class="sub">{_e(describe(comparison))}; difference = candidate - baseline, in points</p>')
        header = comparison_header(comparison)
        parts.append(_table(header, comparison_rows(comparison), last_is_total=True))
    if summary.get("sequential"):
        parts += _sweep_stops(summary["sequential"])
    return _write(sweep_dir / REPORT_FILE, f"Sweep {sweep_dir.name}", parts)


def _many(summary: Mapping[str, Any]) -> list[str]:
    """Which of three or more configurations differ (results.many): their letters, or what is missing."""
    if summary.get("many_policies_missing"):
        return [f'<p class="sub">No many-policy table: {_e(summary["many_policies_missing"])}</p>']
    many = summary.get("many_policies")
    if not many:
        return []
    rows = [
        [p["name"], p["n_episodes"], pc_text(p["pc_success"]), _ci(p), _num(p["median_steps"]), p["letters"]]
        for p in many["policies"]
    ]
    note = (
        f"Configurations that share a letter are not significantly different ({many['test']} test on paired "
        f"episodes for each of the {len(many['pairs'])} pairs, {many['adjustment']}-adjusted, alpha {many['alpha']:g})"
    )
    header = ("configuration", "episodes", "success", "95% CI", "median steps to success", "group")
    return ["<h2>Which configurations differ</h2>", f'<p class="sub">{_e(note)}</p>', _table(header, rows)]


def _sweep_stops(stopped: Sequence[Mapping[str, Any]]) -> list[str]:
    """When and why each task of each combination of a sequential sweep stopped (hydra/sweeper=sequential)."""
    settings = ", ".join(f"{k}={v}" for k, v in stopped[0]["settings"].items() if v is not None)
    rows = [
        (combo["combination"], task, str(t["n_episodes"]), t["outcome"], t["why"])
        for combo in stopped
        for task, t in combo["per_task"].items()
    ]
    return [
        "<h2>Sequential stopping</h2>",
        f'<p class="sub">{_e(settings)}; at most {stopped[0]["n_episodes_max"]} episodes per task</p>',
        _table(("combination", "task", "episodes", "stopped as", "why"), rows),
    ]


def _results_table(results: Results) -> str:
    errors = results.overall.n_errors > 0  # a column only when some episode errored
    header = ("task", "episodes", "successes", "success", "95% CI", "avg sum reward", "avg max reward")
    header += ("error episodes",) if errors else ()
    rows: list[tuple[str, list[Any]]] = []
    for row in table_rows(results):
        s = row.summary
        rewards = [_num(s.avg_sum_reward), _num(s.avg_max_reward), *([s.n_errors] if errors else [])]
        cells = [row.label, s.n_episodes, s.successes, pc_text(s.pc_success), ci_text(s.ci95_pc_success), *rewards]
        rows.append(("" if row.kind == "task" else row.kind, cells))
    body = "".join(
        f'<tr class="{cls}">' + "".join(f"<td>{_e(str(c))}</td>" for c in cells) + "</tr>" for cls, cells in rows
    )
    return f"<table><thead>{_header(header)}</thead><tbody>{body}</tbody></table>"


def _videos(results: Results, out_dir: Path) -> list[str]:
    """The first filmed episode of each task, with its outcome."""
    figures = []
    for task in results.tasks:
        episode = next((r for r in task.records if r.video_path and (out_dir / r.video_path).is_file()), None)
        if episode is None or episode.video_path is None:
            continue
        outcome = '<span class="ok">success</span>' if episode.success else '<span class="fail">failure</span>'
        caption = f"{_e(task.task_name)}, episode {episode.episode_index}: {outcome}"
        figures.append(
            f'<figure><video src="{_e(quote(episode.video_path))}" controls muted loop preload="auto"></video>'
            f"<figcaption>{caption}</figcaption></figure>"
        )
    if not figures:
        return []
    return ["<h2>Videos</h2>", '<div class="videos">', *figures, "</div>"]


def _images(images: Mapping[str, Path], keys: Sequence[str]) -> list[str]:
    out = []
    for key in keys:
        path = images.get(key)
        if path is not None and Path(path).is_file():
            data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
            heading = _e(_IMAGE_HEADINGS.get(key, key))
            out.append(f'<h2>{heading}</h2><img alt="{_e(key)}" src="data:image/png;base64,{data}">')
    return out


def _table(
    header: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    escaped: bool = False,
    kv: bool = False,
    last_is_total: bool = False,
) -> str:
    rows = list(rows)
    cell = (lambda c: str(c)) if escaped else (lambda c: _e(str(c)))
    td = '<td class="kv">' if kv else "<td>"
    body = []
    for i, row in enumerate(rows):
        cls = ' class="overall"' if last_is_total and i == len(rows) - 1 else ""
        body.append(f"<tr{cls}>" + "".join(f"{td}{cell(c)}</td>" for c in row) + "</tr>")
    return f"<table><thead>{_header(header)}</thead><tbody>{''.join(body)}</tbody></table>"


def _header(cells: Sequence[str]) -> str:
    return "<tr>" + "".join(f"<th>{_e(c)}</th>" for c in cells) + "</tr>"


def _flatten(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.extend(_flatten(value, name))
        else:
            out.append((name, value if isinstance(value, str) else json.dumps(value, default=str)))
    return out


def _write(path: Path, title: str, parts: Sequence[str]) -> Path:
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(parts)
        + f"\n<script>{_SCRIPT}</script>\n</body></html>\n"
    )
    write_text_atomic(path, page)
    return path


def _href(target: Path, start: Path) -> str:
    return quote(os.path.relpath(target, start))


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _rate(summary: Summary) -> str:
    return f"{pc_text(summary.pc_success)} {ci_text(summary.ci95_pc_success)}"


def _errors(n_errors: int) -> str:
    return f"; {n_errors} error episodes (the simulator failed twice), left out of the rates" if n_errors else ""


def _ci(row: Mapping[str, Any]) -> str:
    """The interval of a row of sweep_summary.json."""
    return ci_text(row.get("ci95_pc_success"))


def _num(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) and value == value else "-"
