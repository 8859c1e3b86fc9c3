"""The latency curves of a sweep over `eval.clock.latency_ms` on its report page (report.sweep_report): a table per
curve, as sweep_summary.md holds it (results/latency_curve.py)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from lerobot_hydra.results.export import Table, cell
from lerobot_hydra.results.latency_curve import curve_tables


def curve_section(summary: Mapping[str, Any]) -> list[str]:
    """A heading and a table per latency curve; nothing for a sweep without one."""
    return [part for table in curve_tables(summary) for part in _html(table)]


def _html(table: Table) -> list[str]:
    head = "".join(f"<th>{html.escape(name)}</th>" for name, _ in table.columns)
    kinds = [kind for _, kind in table.columns]
    rows = (
        "<tr>" + "".join(f"<td>{html.escape(cell(v, k))}</td>" for v, k in zip(row, kinds, strict=True)) + "</tr>"
        for row in table.rows
    )
    notes = "".join(f'<p class="sub">{html.escape(note)}</p>' for note in table.notes)
    body = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return [f"<h2>{html.escape(table.title)}</h2>", body, notes]
