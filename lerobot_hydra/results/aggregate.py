"""Aggregation (the only one: single runs, merged shards and resumed runs all come through here),
LeRobot's `eval_info.json` layout, the console table, and the task labels, rates and rows every table shares."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.results.stats import wilson_interval


def _summary(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    n = len(records)
    wins = sum(r.success for r in records)
    low, high = wilson_interval(wins, n)
    return {
        # None (null in JSON, which has no NaN) when there is no episode to average.
        "avg_sum_reward": sum(r.sum_reward for r in records) / n if n else None,
        "avg_max_reward": sum(r.max_reward for r in records) / n if n else None,
        "pc_success": 100.0 * wins / n if n else None,
        "n_episodes": n,
        "ci95_pc_success": [100.0 * low, 100.0 * high],
        "video_paths": [r.video_path for r in records if r.video_path],
    }


def aggregate(records: Sequence[EpisodeRecord], eval_s: float) -> dict[str, Any]:
    """LeRobot's eval_info layout (per_task / per_group / overall) plus every episode record.

    `records` must already be in task order (see `records.sort_records`); groups keep first-seen order.
    """
    per_task: dict[tuple[str, int], list[EpisodeRecord]] = {}
    per_group: dict[str, list[EpisodeRecord]] = {}
    for r in records:
        per_task.setdefault((r.task_group, r.task_id), []).append(r)
        per_group.setdefault(r.task_group, []).append(r)
    tasks_out = []
    for (group, task_id), rs in per_task.items():
        summary = _summary(rs)
        tasks_out.append(
            {
                "task_group": group,
                "task_id": task_id,
                "task_name": rs[0].task_name,
                "task": rs[0].task,
                "metrics": {
                    "sum_rewards": [r.sum_reward for r in rs],
                    "max_rewards": [r.max_reward for r in rs],
                    "successes": [r.success for r in rs],
                    "seeds": [r.seed for r in rs],
                    "video_paths": summary["video_paths"],
                    "pc_success": summary["pc_success"],
                    "ci95_pc_success": summary["ci95_pc_success"],
                },
            }
        )
    overall = _summary(records)
    overall["eval_s"] = eval_s
    overall["eval_ep_s"] = eval_s / len(records) if records else None
    return {
        "per_task": tasks_out,
        "per_group": {group: _summary(rs) for group, rs in per_group.items()},
        "overall": overall,
        "episodes": [r.to_dict() for r in records],
    }


def task_label(group: str, task_id: int, name: str) -> str:
    """How every table names a task: its group alone when the task is its own group (a MetaWorld task asked
    for by name), else group/id name."""
    return group if name == group else f"{group}/{task_id} {name}"


def pc_text(pc: Any) -> str:
    return f"{pc:.1f}%" if isinstance(pc, int | float) and pc == pc else "-"


def ci_text(ci: Sequence[float | None] | None) -> str:
    return f"[{ci[0]:.1f}, {ci[1]:.1f}]" if ci and None not in ci else "-"


def rate_text(pc: float | None, ci: Sequence[float | None] | None) -> tuple[str, str]:
    """A success rate and its interval as tables show them; both '-' where the rate is undefined."""
    return (pc_text(pc), ci_text(ci)) if pc is not None else ("-", "-")


@dataclass
class TableRow:
    """A row of a results table: a task ("task"), a group of several tasks ("group") or "overall"."""

    kind: str
    label: str
    summary: dict[str, Any]  # the task's metrics, or the group's or the run's summary
    tasks: list[dict[str, Any]]  # the per_task entries it covers

    @property
    def n_episodes(self) -> int:
        return len(self.summary["successes"]) if self.kind == "task" else int(self.summary["n_episodes"])

    @property
    def successes(self) -> int:
        return sum(sum(t["metrics"]["successes"]) for t in self.tasks)


def table_rows(info: dict[str, Any]) -> Iterator[TableRow]:
    """Each task of each group, then the group's row when there are several groups and it has several tasks,
    and the overall row last."""
    multi_group = len(info["per_group"]) > 1
    for group, summary in info["per_group"].items():
        tasks = [t for t in info["per_task"] if t["task_group"] == group]
        for task in tasks:
            yield TableRow("task", task_label(group, task["task_id"], task["task_name"]), task["metrics"], [task])
        if multi_group and len(tasks) > 1:
            yield TableRow("group", f"{group} (all {len(tasks)} tasks)", summary, tasks)
    yield TableRow("overall", "overall", info["overall"], list(info["per_task"]))


def format_table(info: dict[str, Any], title: str = "") -> str:
    """Task, episodes, success and its interval; one block per group and an overall line."""
    rows = [
        (f"  {r.label}" if r.kind == "task" else r.label, str(r.n_episodes), *_pc(r.summary)) for r in table_rows(info)
    ]
    header = ("task", "episodes", "success", "95% CI")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines = [title] if title else []
    fmt = f"{{:<{widths[0]}}}  {{:>{widths[1]}}}  {{:>{widths[2]}}}  {{:>{widths[3]}}}"
    lines.append(fmt.format(*header))
    rule = "-" * (sum(widths) + 6)
    lines.append(rule)
    for row in rows:
        if row[0] == "overall":
            lines.append(rule)
        lines.append(fmt.format(*row))
    return "\n".join(lines)


def _pc(summary: dict[str, Any]) -> tuple[str, str]:
    return rate_text(summary["pc_success"], summary["ci95_pc_success"])
