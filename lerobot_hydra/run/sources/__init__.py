"""The sources of a run's work (run/execute.py `WorkSource`): a fixed plan (a run, a static shard, one round driven from
outside), sequential rounds in one process, blocks claimed from a dynamic sweep's queue. `source_for` picks the one
a run's settings ask for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lerobot_hydra.run.identity import dynamic_claims
from lerobot_hydra.run.sources.claims import ClaimedBlocks
from lerobot_hydra.run.sources.plan import FixedPlan
from lerobot_hydra.run.sources.rounds import Rounds
from lerobot_hydra.run.work import RoundCap

if TYPE_CHECKING:
    from lerobot_hydra.run.context import RunContext
    from lerobot_hydra.run.execute import WorkSource


def source_for(run: RunContext, cap: RoundCap | None = None) -> WorkSource:
    """Claimed blocks for a dynamic shard (of the round `cap`, in a sequential sweep), the round `cap` of a fixed
    plan, sequential rounds for `eval.sequential.stop`, else the fixed plan."""
    ev = run.eval_cfg
    if dynamic_claims(ev):
        return ClaimedBlocks(run, cap)
    if cap is not None:
        return FixedPlan(run.plan, run.parts.tasks, cap)
    if ev.sequential.stop is not None:
        return Rounds(run.plan, run.parts.tasks, ev.sequential, ev.n_episodes)
    return FixedPlan(run.plan, run.parts.tasks)


__all__ = ["ClaimedBlocks", "FixedPlan", "Rounds", "source_for"]
