"""The console table of a result set, and the task labels, rates and rows every table shares (the report page's
too)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from lerobot_hydra.results.aggregate import Results, Summary, TaskSummary


def task_label(group: str, task_id: int, name: str) -> str:
    """How every table names a task: its group alone when the task is its own group (a MetaWorld task asked
    for by name), else group/id name."""
    return group if name == group else f"{group}/{task_id} {name}"


def pc_text(pc: float | None) -> str:
    return f"{pc:.1f}%" if isinstance(pc, int | float) and pc == pc else "-"


def ci_text(ci: Sequence[float | None] | None) -> str:
    return f"[{ci[0]:.1f}, {ci[1]:.1f}]" if ci and None not in ci else "-"


def rate_text(pc: float | None, ci: Sequence[float | None] | None) -> tuple[str, str]:
    """A success rate and its interval as tables show them; both '-' where the rate is undefined."""
    return (pc_text(pc), ci_text(ci)) if pc is not None else ("-", "-")


@dataclass(frozen=True)
class TableRow:
    """A row of a results table: a task ("task"), a group of several tasks ("group") or "overall"."""

    kind: str
    label: str
    summary: Summary  # the task's, the group's or the run's


def table_rows(results: Results) -> Iterator[TableRow]:
    """Each task of each group, then the group's row when there are several groups and it has several tasks,
    and the overall row last."""
    multi_group = len(results.groups) > 1
    for group in results.groups:
        for task in group.tasks:
            yield TableRow("task", label_of(task), task)
        if multi_group and len(group.tasks) > 1:
            yield TableRow("group", f"{group.group} (all {len(group.tasks)} tasks)", group)
    yield TableRow("overall", "overall", results.overall)


def label_of(task: TaskSummary) -> str:
    return task_label(task.task_group, task.task_id, task.task_name)


def format_table(results: Results, title: str = "") -> str:
    """Task, episodes, success and its interval (and, when some episode errored, the error episodes); one block per
    group and an overall line."""
    errors = results.overall.n_errors > 0
    rows = [
        (
            f"  {r.label}" if r.kind == "task" else r.label,
            str(r.summary.n_episodes),
            *rate_text(r.summary.pc_success, r.summary.ci95_pc_success),
            *((str(r.summary.n_errors),) if errors else ()),
        )
        for r in table_rows(results)
    ]
    header = ("task", "episodes", "success", "95% CI", *(("errors",) if errors else ()))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [title] if title else []
    fmt = f"{{:<{widths[0]}}}" + "".join(f"  {{:>{w}}}" for w in widths[1:])
    lines.append(fmt.format(*header))
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    lines.append(rule)
    for row in rows:
        if row[0] == "overall":
            lines.append(rule)
        lines.append(fmt.format(*row))
    if errors:
        lines.append(error_note(results.overall.n_errors))
    lines += [f"Not reproducible: {reason}" for reason in results.not_reproducible]
    return "\n".join(lines)


def error_note(n_errors: int) -> str:
    """The line under a table whose run had error episodes."""
    return (
        f"{n_errors} error episode(s): the simulator failed twice (see the log); left out of the episodes and rates, "
        "and run again by the same command"
    )
