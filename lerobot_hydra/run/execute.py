"""Feeding a run from a source of work and concluding it: the one path from a run context to its published
results, whichever mode (run/sources/) feeds it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

from lerobot_hydra.core.records import TaskKey
from lerobot_hydra.results.aggregate import Results, aggregate
from lerobot_hydra.rollout.signals import RunInterrupted
from lerobot_hydra.run.context import RunContext
from lerobot_hydra.run.sink import RecordSink
from lerobot_hydra.run.work import Batch


class WorkSource(Protocol):
    """Where a run's work comes from: a fixed plan, rounds, claimed blocks (run/sources/)."""

    @property
    def final(self) -> bool:
        """Once its batches are exhausted: whether this was the run's true end in this process (the policy is then
        finished, so a remote policy's server counts the run complete), rather than one round of several."""
        ...

    def batches(self, run: RunContext) -> Iterator[Batch]:
        """Each batch of work in turn; the run runs it (its records into the run's sink) before the next is asked
        for. Closed early (GeneratorExit) when the run is stopped."""
        ...

    def complete(self, sink: RecordSink) -> bool:
        """Whether every episode this run's shard owes is recorded (the shard file says so; a merge needs it)."""
        ...

    def stops(self) -> dict[TaskKey, int]:
        """Tasks that sequential stopping stopped, and after how many episodes."""
        ...

    def sequential(self, interrupted: bool) -> dict[str, Any] | None:
        """The stopping summary the results carry (None: no sequential stopping)."""
        ...

    def planned(self, sink: RecordSink) -> int:
        """Episodes this run owes, for the status line of a stopped run."""
        ...


def execute(run: RunContext, source: WorkSource) -> Results:
    """Feeds `run` every batch of `source`, then concludes it; a stop signal ends the batches, the run is
    concluded as stopped and the signal raised again. Any other failure ends the run as it stands (the policy let
    go, the shard file written incomplete with every record so far) before it propagates."""
    interrupted = None
    try:
        with contextlib.closing(source.batches(run)) as batches:
            for batch in batches:
                run.run(batch.work, batch.record)
    except RunInterrupted as err:
        interrupted = err.with_traceback(None)  # its frames would keep the closed workers' shared memory alive
    except BaseException:
        run.end(False, False, source.stops())
        raise
    return conclude(run, source, interrupted)


def conclude(run: RunContext, source: WorkSource, interrupted: RunInterrupted | None = None) -> Results:
    """Ends `run` as `source` says (its policy told, its shard file written), then publishes its results."""
    complete = source.complete(run.sink)
    run.end(interrupted is None and source.final, complete, source.stops())
    sink = run.sink
    results = aggregate(sink.sorted_records(), sink.eval_s, sink.provenance, complete)
    results = results.with_sequential(source.sequential(interrupted is not None))
    run.publish(results, interrupted, source.planned(sink))
    if interrupted is not None:
        raise interrupted
    return results
