"""Blocks claimed from a dynamic sweep's work queue (`eval.claims=dynamic`, store/queue.py): claim a block, run its
episodes that nobody recorded yet, mark it done, and again, until every block of the sweep is done; the run is then
complete. The task just run is preferred for the next block, so the kept pools build nothing new. In a sequential
sweep's round (`RoundCap`) the queue holds that round's episodes of the tasks not yet stopped, one queue per round.
Every episode is still a function of (seed, task, index), so where it ran never changes the merge."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lerobot_hydra.core.layout import queue_dir_name
from lerobot_hydra.core.records import EpisodeKey, EpisodeRecord, TaskKey
from lerobot_hydra.publish.recording import PART_EPISODES, DatasetRecorder
from lerobot_hydra.publish.recording_parts import stepped_units
from lerobot_hydra.results.sequential import rounds
from lerobot_hydra.rollout.plan import TaskBlock, TaskWork, claim_regions, plan_size
from lerobot_hydra.run.sink import RecordSink
from lerobot_hydra.run.work import Batch, RoundCap, capped_plan
from lerobot_hydra.store.queue import Claim, WorkQueue
from lerobot_hydra.store.shard_file import fingerprint

if TYPE_CHECKING:
    from lerobot_hydra.run.context import RunContext

log = logging.getLogger("lerobot_hydra")


def queue_dir(out_dir: Path, identity: dict[str, Any], num_shards: int, round_end: int | None = None) -> Path:
    """Beside the shard dirs (a sweep's combination dir): one queue per configuration and shard count (and round)."""
    name = queue_dir_name(fingerprint(identity), num_shards)
    return out_dir.parent / (name if round_end is None else f"{name}_round_{round_end}")


class ClaimedBlocks:
    def __init__(self, run: RunContext, cap: RoundCap | None = None) -> None:
        assert run.out_dir is not None and run.identity is not None  # the Python API refuses dynamic claims
        ev = run.eval_cfg
        self.cap, self.plan = cap, run.plan
        self.regions = claim_regions(_claimable(run.plan, cap, ev.sequential.round, ev.n_episodes), run.num_shards)
        self.root = queue_dir(run.out_dir, run.identity, run.num_shards, cap.end if cap is not None else None)
        self.drained = False

    @property
    def final(self) -> bool:
        return self.drained and (self.cap is None or self.cap.final)

    def batches(self, run: RunContext) -> Iterator[Batch]:
        if not any(self.regions):  # a sequential sweep's last launch: every task stopped, nothing to claim
            self.drained = True
            return
        ev = run.eval_cfg
        held: TaskKey | None = None
        with WorkQueue(self.root, self.regions, ev.shard_id, run.sink.out_dir, ev.lease_s) as queue:  # type: ignore[arg-type]
            done, speed = _Done(queue, run.recorder), _Speed(queue)
            errored: list[Claim] = []  # blocks run here with error episodes
            try:
                while (claim := done.next_claim(held)) is not None:
                    work, steps_only = _block_work(claim, queue, run)
                    guard = _Guarded(claim, run, steps_only)
                    began = time.monotonic()
                    yield Batch(work, guard)
                    speed.ran(len(work[0].episodes), time.monotonic() - began)
                    if guard.errors:
                        errored.append(claim)
                    if guard.dropped:
                        log.warning("lost the claim of %s/%d episodes %d-%d to another job", *_where(claim))
                    else:
                        done.add(claim)
                    held = claim.block.key
                self.drained = True
            finally:
                done.flush()
                if run.health.unhealthy:  # its claims go to the other shards now, not once its lease expires
                    queue.release(reopen=errored)

    def complete(self, sink: RecordSink) -> bool:
        return self.final

    def stops(self) -> dict[TaskKey, int]:
        return dict(self.cap.stops) if self.cap is not None else {}

    def sequential(self, interrupted: bool) -> dict[str, Any] | None:
        return self.cap.summary if self.cap is not None else None

    def planned(self, sink: RecordSink) -> int:
        return plan_size(capped_plan(self.plan, self.stops()))


def _claimable(plan: list[TaskBlock], cap: RoundCap | None, round_size: int, n_max: int) -> list[TaskBlock]:
    """The episodes the sweep's queue holds: the whole run's; in a round, the round's episodes of the tasks not
    stopped (those before it were recorded: the sweep decided on them)."""
    if cap is None:
        return plan
    start = max((end for end in rounds(n_max, round_size) if end < cap.end), default=0)
    return [TaskBlock(*b.key, start, cap.end - 1) for b in plan if b.key not in cap.stops and start < cap.end]


class _Guarded:
    """Records only while the claim holds: a job that lost its lease records nothing more. An episode of
    `steps_only` (recorded by an earlier owner, whose recording of its steps was lost) goes to the recorder only."""

    def __init__(self, claim: Claim, run: RunContext, steps_only: set[EpisodeKey]) -> None:
        self.claim, self.run, self.steps_only, self.dropped, self.errors = claim, run, steps_only, 0, 0

    def __call__(self, record: EpisodeRecord) -> None:
        if self.claim.lost():
            self.dropped += 1
        elif record.unit in self.steps_only and self.run.recorder is not None:
            self.run.recorder.write(record)
        else:
            self.errors += record.errored
            self.run.record(record)


class _Speed:
    """This job's measured speed, published in the queue for the jobs' choices of blocks (store/queue.py): its
    episodes per second over its blocks, the first block (which builds the policy and the envs) left out once
    there are others."""

    def __init__(self, queue: WorkQueue) -> None:
        self.queue, self.blocks = queue, list[tuple[int, float]]()

    def ran(self, episodes: int, seconds: float) -> None:
        if episodes:
            self.blocks.append((episodes, seconds))
            counted = self.blocks[1:] or self.blocks
            self.queue.report_rate(sum(n for n, _ in counted) / max(sum(s for _, s in counted), 1e-6))


class _Done:
    """Marks run blocks done. While recording, a block is marked done only once its steps are in a finished part
    (so a finished block's steps survive a kill): blocks wait here until `PART_EPISODES` of their episodes have run
    or this job has no block to claim at once, then the recorder finishes its part and they are marked together."""

    def __init__(self, queue: WorkQueue, recorder: DatasetRecorder | None) -> None:
        self.queue, self.recorder, self.waiting = queue, recorder, list[Claim]()

    def next_claim(self, held: TaskKey | None) -> Claim | None:
        got = self.queue.try_claim(held)
        if isinstance(got, Claim):
            return got
        self.flush()  # before waiting on the others (they may wait for these blocks)
        return self.queue.next_claim(held)

    def add(self, claim: Claim) -> None:
        self.waiting.append(claim)
        if self.recorder is None or sum(len(c.block.episodes) for c in self.waiting) >= PART_EPISODES:
            self.flush()

    def flush(self) -> None:
        if self.waiting and self.recorder is not None:
            self.recorder.cut()
        for claim in self.waiting:
            self.queue.finish(claim)
        self.waiting.clear()


def _where(claim: Claim) -> tuple[str, int, int, int]:
    return (*claim.block.key, claim.block.first, claim.block.last)


def _block_work(claim: Claim, queue: WorkQueue, run: RunContext) -> tuple[list[TaskWork], set[EpisodeKey]]:
    """The claimed block's episodes that neither this shard nor the block's earlier owners recorded, and, when
    recording, those recorded (here or by an earlier owner) whose steps a killed process lost: they run again for
    their steps. The second: the units recorded elsewhere, whose records go to the recorder only."""
    block, sink, recorder = claim.block, run.sink, run.recorder
    assert sink.out_dir is not None
    own = {u for u in sink.done() if u[:2] == block.key and u[2] in block.episodes}
    dirs = queue.earlier_dirs(claim, sink.out_dir)
    elsewhere = queue.recorded_in(claim, dirs)
    again: set[EpisodeKey] = set()
    steps_only: set[EpisodeKey] = set()
    if recorder is not None:
        steps_only = elsewhere - {u for d in dirs for u in stepped_units(d)} - recorder.stepped
        again = recorder.missing(own) | steps_only
    todo = [k for k in block.episodes if (*block.key, k) not in (own | elsewhere) - again]
    taken = f", taken over (generation {claim.gen})" if claim.gen else ""
    log.info("claimed %s/%d episodes %d-%d (%d to run)%s", *_where(claim), len(todo), taken)
    if again:
        log.info("%d of them recorded before, their steps lost with a killed job: run for their steps", len(again))
    task = next(t for t in run.parts.tasks if t.key == block.key)
    return [TaskWork(task, todo)], steps_only
