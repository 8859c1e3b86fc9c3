"""Tables for papers and leaderboards: one table, rendered as Markdown, LaTeX (booktabs) or CSV.

A `Table` holds raw values and what kind each column is; the renderers format them: rates and differences in
points to one decimal, intervals as [low, high] (in CSV as two columns of unrounded numbers), p-values as the
console shows them. Notes (which test, which adjustment, what a mark means) go under a Markdown table, into a LaTeX
table's caption, and into CSV as constant columns, so each format says how its marks were made.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("console", "markdown", "latex", "csv")
EXPORT_SUFFIXES = {"markdown": ".md", "latex": ".tex", "csv": ".csv"}
# Column kinds: text, int, pc (a rate or share in percent), diff (a difference in points), ci (a (low, high) pair in
# percent or points), p (a p-value), num (a number such as a median step count).
KINDS = ("text", "int", "pc", "diff", "ci", "p", "num")
# `<` and `>` in math mode: in text mode, under LaTeX's default font encoding (OT1), they typeset as ¡ and ¿.
_LATEX_SPECIAL = {c: "\\" + c for c in "&%$#_{}"} | {
    "\\": r"\textbackslash{}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": "$<$",
    ">": "$>$",
}


@dataclass(frozen=True)
class Table:
    title: str
    columns: Sequence[tuple[str, str]]  # (header, kind)
    rows: Sequence[Sequence[Any]]
    notes: Sequence[str] = ()
    totals: int = 0  # how many last rows are totals (a rule above them)
    meta: dict[str, str] = field(default_factory=dict)  # constant columns of the CSV (test, adjustment)


def cell(value: Any, kind: str) -> str:
    """A value as the Markdown and LaTeX tables show it; '-' where there is none."""
    from lerobot_hydra.results.pairing_text import format_p

    if value is None or value == "":
        return "-" if kind != "text" else ""
    if kind == "pc":
        return f"{value:.1f}"
    if kind == "diff":
        return f"{value:+.1f}"
    if kind == "ci":
        sign = "+" if any(v < 0 for v in value) else ""
        return f"[{value[0]:{sign}.1f}, {value[1]:{sign}.1f}]"
    if kind == "p":
        return format_p(value)
    if kind == "num":
        return f"{value:g}"
    return str(value)


def render(table: Table, fmt: str) -> str:
    """`table` as console, Markdown, LaTeX or CSV text."""
    return {"console": console, "markdown": markdown, "latex": latex, "csv": to_csv}[fmt](table)


def console(table: Table) -> str:
    """Columns aligned as the console tables are, the notes below."""
    from lerobot_hydra.results.pairing_text import align

    rows = [tuple(cell(v, k) for v, (_, k) in zip(row, table.columns, strict=True)) for row in table.rows]
    lines = align([tuple(name for name, _ in table.columns), *rows], rule_before_last=table.totals == 1)
    return "\n".join([table.title, *lines, *(f"  {note}" for note in table.notes)]) + "\n"


def markdown(table: Table) -> str:
    header = [name for name, _ in table.columns]
    align = [":--" if kind == "text" else "--:" for _, kind in table.columns]
    lines = [f"**{table.title}**", "", _md_row(header), _md_row(align)]
    lines += [_md_row([cell(v, k) for v, (_, k) in zip(row, table.columns, strict=True)]) for row in table.rows]
    return "\n".join([*lines, *([""] + [f"{note}  " for note in table.notes] if table.notes else [])]) + "\n"


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def latex(table: Table) -> str:
    """A booktabs table (\\usepackage{booktabs}); the notes in its caption."""
    spec = "".join("l" if kind == "text" else "r" for _, kind in table.columns)
    caption = " ".join([f"{table.title}.", *table.notes])
    lines = [
        r"\begin{table}[htbp]",
        r"\centering",
        rf"\caption{{{escape(caption)}}}",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(escape(name) for name, _ in table.columns) + r" \\",
        r"\midrule",
    ]
    for i, row in enumerate(table.rows):
        if table.totals and i == len(table.rows) - table.totals and i > 0:
            lines.append(r"\midrule")
        cells = [escape(cell(v, k)) for v, (_, k) in zip(row, table.columns, strict=True)]
        lines.append(" & ".join(cells) + r" \\")
    return "\n".join([*lines, r"\bottomrule", r"\end{tabular}", r"\end{table}"]) + "\n"


def escape(text: str) -> str:
    """Text safe in LaTeX: its special characters escaped."""
    return "".join(_LATEX_SPECIAL.get(c, c) for c in text)


def to_csv(table: Table) -> str:
    """One header row and a row per table row: intervals split into `<column> low` and `<column> high`, numbers
    unrounded, the meta columns last."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header: list[str] = []
    for name, kind in table.columns:
        header += [f"{name} low", f"{name} high"] if kind == "ci" else [name]
    writer.writerow([*header, *table.meta])
    for row in table.rows:
        values: list[Any] = []
        for value, (_, kind) in zip(row, table.columns, strict=True):
            values += (list(value) if value is not None else ["", ""]) if kind == "ci" else [_raw(value)]
        writer.writerow([*values, *table.meta.values()])
    return out.getvalue()


def _raw(value: Any) -> Any:
    return "" if value is None else value


def render_all(tables: Sequence[Table], fmt: str) -> str:
    """Several tables in one document (Markdown, LaTeX); CSV takes the first only, as one file holds one table."""
    if fmt == "csv":
        return to_csv(tables[0])
    return "\n".join(render(t, fmt) for t in tables)
