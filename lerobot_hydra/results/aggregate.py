"""The aggregation (the only one: single runs, merged shards, resumed runs and pooled seeds all come through here):
episode records -> typed results, per task, per group and overall.

Every sink (the eval_info.json writer, the table, plots, the report page, loggers, the sweep summary) reads these
dataclasses; none of them recomputes a rate or an average. Error episodes (core/records.py `error`: the simulator
failed twice) are counted as `n_errors` and left out of everything else: `n_episodes` counts the evaluated episodes,
the rates, intervals and averages are theirs, and a task summary's `records` are its evaluated episodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lerobot_hydra.core.records import EpisodeRecord, TaskKey
from lerobot_hydra.results.stats import wilson_interval


@dataclass(frozen=True)
class Summary:
    """What is summarized of a set of episodes; a rate or an average over no episode is None."""

    n_episodes: int  # evaluated episodes, error episodes left out
    successes: int
    pc_success: float | None
    ci95_pc_success: tuple[float, float]  # the Wilson interval of the success rate, in percent
    avg_sum_reward: float | None
    avg_max_reward: float | None
    video_paths: tuple[str, ...]  # relative to the results' dir, in episode order
    n_errors: int  # error episodes: not evaluated, counted apart
    # The median and 99th percentile of the episodes' inference latencies in ms (the latency each was charged on a
    # real-time eval.clock, else the wall time measured); None when no record says (a policy that is not chunked).
    inference_ms_p50: float | None
    inference_ms_p99: float | None


@dataclass(frozen=True)
class TaskSummary(Summary):
    task_group: str
    task_id: int
    task_name: str
    task: str  # its language description
    records: tuple[EpisodeRecord, ...]  # its evaluated episodes (error episodes left out)

    @property
    def key(self) -> TaskKey:
        return (self.task_group, self.task_id)


@dataclass(frozen=True)
class GroupSummary(Summary):
    group: str
    tasks: tuple[TaskSummary, ...]


@dataclass(frozen=True)
class Results:
    """A result set (a run, a shard, a merged combination, pooled seeds): its tasks in task order, its groups in
    first-seen order, the overall summary and every episode record."""

    tasks: tuple[TaskSummary, ...]
    groups: tuple[GroupSummary, ...]
    overall: Summary
    episodes: tuple[EpisodeRecord, ...]  # every record, error episodes included
    eval_s: float
    # What made the results (rollout.provenance); None where it is not known.
    provenance: Mapping[str, Any] | None = None
    # False for a run that was stopped; None where it does not apply (a merge holds complete shards only).
    complete: bool | None = None
    # Sequential stopping (eval.sequential): its settings and, per task label, when and why the task stopped.
    sequential: Mapping[str, Any] | None = None

    @property
    def eval_ep_s(self) -> float | None:
        return self.eval_s / len(self.episodes) if self.episodes else None

    @property
    def not_reproducible(self) -> list[str]:
        """Why some episodes cannot be run again to the same outcome (their records say, e.g. a measured
        eval.clock); empty when every one can."""
        return sorted({r.not_reproducible for r in self.episodes if r.not_reproducible})

    def task(self, key: TaskKey) -> TaskSummary | None:
        return next((t for t in self.tasks if t.key == key), None)

    def with_sequential(self, sequential: Mapping[str, Any] | None) -> Results:
        return dataclasses.replace(self, sequential=sequential)


def summarize(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """The `Summary` fields of `records`: their error episodes counted, the others summarized."""
    n_errors = sum(r.errored for r in records)
    records = [r for r in records if not r.errored]
    n = len(records)
    wins = sum(r.success for r in records)
    low, high = wilson_interval(wins, n)
    return {
        "n_episodes": n,
        "successes": wins,
        "pc_success": 100.0 * wins / n if n else None,
        "ci95_pc_success": (100.0 * low, 100.0 * high),
        "avg_sum_reward": sum(r.sum_reward for r in records) / n if n else None,
        "avg_max_reward": sum(r.max_reward for r in records) / n if n else None,
        "video_paths": tuple(r.video_path for r in records if r.video_path),
        "n_errors": n_errors,
        **latency_percentiles(records),
    }


def latency_percentiles(records: Sequence[EpisodeRecord]) -> dict[str, float | None]:
    """p50 and p99 of every inference of `records`: its charged latency (`latency_ms`), else its wall time."""
    import numpy as np

    values = [ms for r in records for ms in (r.latency_ms if r.latency_ms is not None else r.infer_ms or [])]
    if not values:
        return {"inference_ms_p50": None, "inference_ms_p99": None}
    p50, p99 = np.percentile(np.asarray(values, dtype=np.float64), [50, 99])
    return {"inference_ms_p50": round(float(p50), 3), "inference_ms_p99": round(float(p99), 3)}


def aggregate(
    records: Sequence[EpisodeRecord],
    eval_s: float,
    provenance: Mapping[str, Any] | None = None,
    complete: bool | None = None,
) -> Results:
    """The results of `records`, which must already be in task order (see `records.sort_records`)."""
    by_task: dict[TaskKey, list[EpisodeRecord]] = {}
    for r in records:
        by_task.setdefault((r.task_group, r.task_id), []).append(r)
    tasks = tuple(
        TaskSummary(
            **summarize(rs),
            task_group=group,
            task_id=task_id,
            task_name=rs[0].task_name,
            task=rs[0].task,
            records=tuple(r for r in rs if not r.errored),
        )
        for (group, task_id), rs in by_task.items()
    )
    group_names = list(dict.fromkeys(r.task_group for r in records))
    groups = tuple(
        GroupSummary(
            **summarize([r for r in records if r.task_group == g]),
            group=g,
            tasks=tuple(t for t in tasks if t.task_group == g),
        )
        for g in group_names
    )
    return Results(tasks, groups, Summary(**summarize(records)), tuple(records), eval_s, provenance, complete)
