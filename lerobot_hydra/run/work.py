"""What a source of work hands a run (`Batch`), a round driven from outside (`RoundCap`), and the planning the
sources share: the plan a run's records are accepted for (`planned_for`: the run context opens its sink with it), a
plan's episodes not yet recorded, cut at a round's end and at stopped tasks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lerobot_hydra.core.records import EpisodeKey, TaskKey
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.results.sequential import Outcomes
from lerobot_hydra.rollout.build import RunParts
from lerobot_hydra.rollout.plan import TaskBlock, TaskWork, shard_plan
from lerobot_hydra.rollout.runner import OnRecord
from lerobot_hydra.run.identity import dynamic_claims
from lerobot_hydra.run.sink import RecordSink
from lerobot_hydra.schemas.schema import EvalConfig
from lerobot_hydra.schemas.validation import check_shards_have_work


@dataclass(frozen=True)
class Batch:
    """Work for the run to do now; `record`: where its records go instead of the run's own `record`."""

    work: list[TaskWork]
    record: OnRecord | None = None


@dataclass(frozen=True)
class RoundCap:
    """One round of a sequence driven from outside (a sequential sweep's round, a paired comparison's): only the
    episodes before `end`, none past a stopped task's stop; `summary`: the stopping summary so far; `final`: no
    later round runs this configuration (its policy is then told the run is over)."""

    end: int
    stops: dict[TaskKey, int] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    final: bool = False


def planned_for(parts: RunParts, eval_cfg: EvalConfig) -> list[TaskBlock]:
    """This shard's block of the run's episodes; a dynamic shard may record any episode (it claims its blocks): its
    plan is the whole run's."""
    n_tasks, num_shards = len(parts.tasks), eval_cfg.num_shards or 1
    check_shards_have_work(n_tasks * eval_cfg.n_episodes, num_shards, n_tasks, eval_cfg.n_episodes)
    keys = [t.key for t in parts.tasks]
    if dynamic_claims(eval_cfg):
        return shard_plan(keys, eval_cfg.n_episodes, 0, 1)
    return shard_plan(keys, eval_cfg.n_episodes, eval_cfg.shard_id, num_shards)


def plan_work(
    tasks: list[TaskSpec], plan: list[TaskBlock], sink: RecordSink, again: set[EpisodeKey] | None = None
) -> list[TaskWork]:
    """Each planned task's episodes not yet recorded in `sink` (and those of `again`, recorded but to run again
    for their steps), in task order; linear in the episodes."""
    by_key = {t.key: t for t in tasks}
    done = sink.done() - (again or set())
    recorded, successes = sink.recorded_per_task()
    work = []
    for block in plan:
        todo = [k for k in block.episodes if (*block.key, k) not in done]
        work.append(TaskWork(by_key[block.key], todo, done=recorded[block.key], successes=successes[block.key]))
    return work


def capped(work: list[TaskWork], end: int | None, stops: dict[TaskKey, int]) -> list[TaskWork]:
    """`work` without the episodes at or past `end` (None: no end) and past each stopped task's stop."""
    out = []
    for w in work:
        limits = [n for n in (end, stops.get(w.task.key)) if n is not None]
        limit = min(limits) if limits else None
        out.append(TaskWork(w.task, [k for k in w.episodes if limit is None or k < limit], w.done, w.successes))
    return out


def capped_plan(plan: list[TaskBlock], stops: dict[TaskKey, int]) -> list[TaskBlock]:
    """The plan with each stopped task's block cut at its stop (a block cut to nothing is left out)."""
    out = []
    for block in plan:
        last = min(block.last, stops.get(block.key, block.last + 1) - 1)
        if last >= block.first:
            out.append(TaskBlock(block.task_group, block.task_id, block.first, last))
    return out


def all_recorded(plan: list[TaskBlock], sink: RecordSink) -> bool:
    """Whether every planned episode has a record, an error episode's included (the run is complete; its rerun
    still runs the error episodes again)."""
    done = {r.unit for r in sink.records}
    return all((*block.key, k) in done for block in plan for k in block.episodes)


def outcomes_of(sink: RecordSink, key: TaskKey) -> Outcomes:
    """Episode index -> success of `key`'s episodes recorded in `sink`; None for an error episode."""
    return {r.episode_index: None if r.errored else r.success for r in sink.records if r.task_key == key}
