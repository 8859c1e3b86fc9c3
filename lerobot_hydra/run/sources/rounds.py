"""Sequential stopping in one process (eval.sequential.stop): the episodes of each task run in rounds of
eval.sequential.round; after each round every undecided task is judged on its episodes so far, in episode order
(results/sequential.py), and a decided task runs no more. eval.n_episodes is the maximum.

The decision after round r reads episodes 0..r*round-1 of the task only, so the stopping point and the records are
the same whatever the batch size, lanes or timing, and a resumed run re-reads its recorded rounds and goes on with
the same sequence. The run's policy, workers and simulators serve every round (run/context.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from lerobot_hydra.core.records import TaskKey
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.results.sequential import Decision, TaskStops, one_policy_of, round_ends, successes_before
from lerobot_hydra.results.table import task_label
from lerobot_hydra.rollout.plan import TaskBlock, plan_size
from lerobot_hydra.run.sink import RecordSink
from lerobot_hydra.run.work import Batch, all_recorded, capped, capped_plan, outcomes_of, plan_work
from lerobot_hydra.schemas.schema import SequentialConfig

if TYPE_CHECKING:
    from lerobot_hydra.run.context import RunContext

log = logging.getLogger("lerobot_hydra")


class Rounds:
    def __init__(self, plan: list[TaskBlock], tasks: list[TaskSpec], seq: SequentialConfig, n_max: int) -> None:
        self.plan, self.tasks, self.seq = plan, tasks, seq
        self.decided = TaskStops(asdict(seq), n_max)
        self.decided.names = {t.key: task_label(t.task_group, t.task_id, t.name) for t in tasks}
        self.final = False
        self._round_end: int | None = None  # the round running now

    def batches(self, run: RunContext) -> Iterator[Batch]:
        keys = [block.key for block in self.plan]
        seq = self.seq

        def judge(end: int) -> bool:
            def decide(key: TaskKey) -> Decision:
                return one_policy_of(seq, successes_before(outcomes_of(run.sink, key), end))

            return self.decided.judge_round(keys, end, decide, lambda line: log.info("%s", line))

        for end in round_ends(self.decided.n_max, seq.round, judge):
            self._round_end = end
            work = plan_work(self.tasks, self.plan, run.sink, run.lost_steps())
            yield Batch(capped(work, end, self.decided.stopped_after()))
        self._round_end = None
        self.final = True

    def complete(self, sink: RecordSink) -> bool:
        decided = all(block.key in self.decided.stops for block in self.plan)
        return decided and all_recorded(capped_plan(self.plan, self.stops()), sink)

    def stops(self) -> dict[TaskKey, int]:
        return self.decided.stopped_after()

    def sequential(self, interrupted: bool) -> dict[str, Any] | None:
        return self.decided.summary(interrupted_in=self._round_end if interrupted else None)

    def planned(self, sink: RecordSink) -> int:
        return plan_size(capped_plan(self.plan, self.stops()))
