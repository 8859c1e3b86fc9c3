"""A fixed plan: a run's or a static shard's planned episodes not yet recorded, run as one batch. With a round
(`RoundCap`: a sequential sweep's job, a paired comparison's side) only the episodes before the round's end and none
past a stopped task's stop."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lerobot_hydra.core.records import TaskKey
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.rollout.plan import TaskBlock, TaskWork, plan_size
from lerobot_hydra.run.sink import RecordSink
from lerobot_hydra.run.work import Batch, RoundCap, all_recorded, capped, capped_plan, plan_work

if TYPE_CHECKING:
    from lerobot_hydra.run.context import RunContext

log = logging.getLogger("lerobot_hydra")


class FixedPlan:
    def __init__(self, plan: list[TaskBlock], tasks: list[TaskSpec], cap: RoundCap | None = None) -> None:
        self.plan, self.tasks, self.cap = plan, tasks, cap
        planned = {block.key for block in plan}  # a shard's plan may hold only some tasks
        self._stops = {k: n for k, n in cap.stops.items() if k in planned} if cap is not None else {}
        self.final = cap is None or cap.final

    def batches(self, run: RunContext) -> Iterator[Batch]:
        work = plan_work(self.tasks, self.plan, run.sink, run.lost_steps())
        if self.cap is not None:
            work = capped(work, self.cap.end, self._stops)
        _log_plan(run, work)
        yield Batch(work)

    def complete(self, sink: RecordSink) -> bool:
        return all_recorded(capped_plan(self.plan, self._stops), sink)

    def stops(self) -> dict[TaskKey, int]:
        return dict(self._stops)

    def sequential(self, interrupted: bool) -> dict[str, Any] | None:
        return self.cap.summary if self.cap is not None else None

    def planned(self, sink: RecordSink) -> int:
        return plan_size(capped_plan(self.plan, self._stops))


def _log_plan(run: RunContext, work: list[TaskWork]) -> None:
    """What a resumed run or a shard has to run, said once."""
    if run.sink.resumed:
        to_run = sum(len(w.episodes) for w in work)
        log.info("resuming in %s: %d episodes already recorded, %d to run", run.out_dir, run.sink.resumed, to_run)
    if run.num_shards > 1:
        shard = f"shard {run.eval_cfg.shard_id} of {run.num_shards}"
        log.info("%s: %d episodes over %d tasks", shard, plan_size(run.plan), len(work))
