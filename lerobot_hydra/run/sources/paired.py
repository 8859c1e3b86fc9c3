"""The paired comparison's rounds (app/paired_sequential.py, `lerobot-hydra-sequential-compare`): a source of the
candidate's run that drives the baseline's run too. Each round the baseline runs its episodes before the round's
end, then the candidate (this source's batch), each side on its own run context, warm from round to round; then
every undecided task is judged on its pairs so far, a pair with an error episode on either side left out
(results/sequential.py: the one round loop, the one paired-drop rule)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import TaskKey
from lerobot_hydra.results.sequential import Decision, TaskStops, paired, pairs_before, round_ends
from lerobot_hydra.results.table import task_label
from lerobot_hydra.rollout.plan import TaskBlock, plan_size
from lerobot_hydra.run.sink import RecordSink
from lerobot_hydra.run.sources.plan import FixedPlan
from lerobot_hydra.run.work import Batch, RoundCap, all_recorded, capped, capped_plan, outcomes_of, plan_work

if TYPE_CHECKING:
    from lerobot_hydra.run.context import RunContext


class PairedRounds:
    def __init__(self, base: RunContext, decided: TaskStops, round_size: int) -> None:
        self.base, self.decided, self.round_size = base, decided, round_size
        self.keys = [t.key for t in base.parts.tasks]
        self.dropped: dict[str, int] = {}  # task label -> pairs left out for an error episode
        decided.names = {t.key: task_label(t.task_group, t.task_id, t.name) for t in base.parts.tasks}
        self.plan: list[TaskBlock] = []  # the candidate's
        self.final = True  # the comparison's end is both sides' runs' end

    def of(self, cand: RunContext) -> PairedRounds:
        """This source for the candidate's run `cand` (`evaluate_config`'s `source`)."""
        if [t.key for t in cand.parts.tasks] != self.keys:
            raise UserError("the baseline and the candidate run different tasks; set env and its tasks in the common")
        self.plan = cand.plan
        return self

    def batches(self, run: RunContext) -> Iterator[Batch]:
        base, decided, s = self.base, self.decided, self.decided.settings

        def judge(end: int) -> bool:
            def decide(key: TaskKey) -> Decision:
                both = outcomes_of(base.sink, key), outcomes_of(run.sink, key)
                pairs, self.dropped[decided.names[key]] = pairs_before(*both, end)
                return paired(pairs, s["alpha"], s["beta"], s["detect"], s["discordance"])

            return decided.judge_round(self.keys, end, decide, lambda line: None)

        for end in round_ends(decided.n_max, self.round_size, judge):
            base.run(capped(plan_work(base.parts.tasks, base.plan, base.sink, base.lost_steps()), end, self.stops()))
            work = plan_work(run.parts.tasks, run.plan, run.sink, run.lost_steps())
            yield Batch(capped(work, end, self.stops()))

    def summary(self) -> dict[str, Any]:
        """What OUT/sequential.json and both sides' results hold: the stopping summary, the pairs left out."""
        summary = self.decided.summary(self.keys)
        summary["error_pairs_dropped"] = {task: n for task, n in self.dropped.items() if n}
        return summary

    def side(self, run: RunContext) -> FixedPlan:
        """How a side's run concludes: its plan cut at the stops, with the stopping summary; nothing left to run."""
        cap = RoundCap(self.decided.n_max, self.decided.stopped_after(), self.summary(), final=True)
        return FixedPlan(run.plan, run.parts.tasks, cap)

    def complete(self, sink: RecordSink) -> bool:
        return all_recorded(capped_plan(self.plan, self.stops()), sink)

    def stops(self) -> dict[TaskKey, int]:
        return self.decided.stopped_after()

    def sequential(self, interrupted: bool) -> dict[str, Any] | None:
        return self.summary()

    def planned(self, sink: RecordSink) -> int:
        return plan_size(capped_plan(self.plan, self.stops()))
