"""A dynamic shard's run (`eval.claims=dynamic`): claim a block from the sweep's work queue (rundir/queue.py), run
its episodes that nobody recorded yet, mark it done, and again, until every block of the sweep is done; then the
shard's file is written complete. The policy is built once and the task just run is preferred for the next block.
Every episode is still a function of (seed, task, index), so where it ran never changes the merge."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from lerobot_hydra.config.schema import EvalConfig
from lerobot_hydra.core.layout import queue_dir_name
from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.outputs.recording import PART_EPISODES, DatasetRecorder
from lerobot_hydra.outputs.recording_parts import stepped_units
from lerobot_hydra.policies.base import Policy
from lerobot_hydra.rollout.build import RunParts
from lerobot_hydra.rollout.lanes import Pools
from lerobot_hydra.rollout.plan import claim_blocks
from lerobot_hydra.rollout.runner import TaskWork
from lerobot_hydra.rollout.stopping import RunInterrupted
from lerobot_hydra.rundir.queue import Claim, WorkQueue
from lerobot_hydra.rundir.shard_file import fingerprint
from lerobot_hydra.rundir.store import RunStore
from lerobot_hydra.vector.task_envs import EnvPool, stop_worker_servers

log = logging.getLogger("lerobot_hydra")

RunLanes = Callable[..., RunInterrupted | None]


def queue_dir(out_dir: Path, identity: dict[str, Any], num_shards: int) -> Path:
    """Beside the shard dirs (a sweep's combination dir): one queue per configuration and shard count."""
    return out_dir.parent / queue_dir_name(fingerprint(identity), num_shards)


class PoolCache:
    """The shard's envs, kept from block to block (`make_pools` of lanes.evaluate): one pool per spaces and
    rendering, replaced only when a block needs more sub-envs, so a block of the task just run builds nothing."""

    def __init__(self) -> None:
        self._pools: dict[tuple[str, bool], EnvPool] = {}

    def __call__(self, config: EnvConfig, tasks: list[TaskSpec], n_envs: int, use_async: bool, render: bool) -> Pools:
        out = {}
        for task in tasks:
            spaces = config.spaces(task)
            key = (repr(spaces), render)
            pool = self._pools.get(key)
            if pool is None or pool.num_envs < n_envs:
                if pool is not None:
                    pool.close()
                pool = self._pools[key] = EnvPool(config, n_envs, use_async, spaces, render)
            out[task.key] = pool
        return out

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


class _Guarded:
    """Records into the store only while the claim holds: a job that lost its lease records nothing more. An
    episode of `steps_only` (recorded by an earlier owner, whose recording of its steps was lost) goes to the
    recorder only."""

    def __init__(
        self, claim: Claim, store: RunStore, recorder: DatasetRecorder | None, steps_only: set[tuple[str, int, int]]
    ) -> None:
        self.claim, self.store, self.recorder, self.steps_only, self.dropped = claim, store, recorder, steps_only, 0

    def __call__(self, record: EpisodeRecord) -> None:
        if self.claim.lost():
            self.dropped += 1
        elif record.unit in self.steps_only and self.recorder is not None:
            self.recorder.write(record)
        else:
            self.store.add(record)


def run_claimed(
    cfg: DictConfig,
    eval_cfg: EvalConfig,
    parts: RunParts,
    store: RunStore,
    identity: dict[str, Any],
    run_lanes: RunLanes,
    recorder: DatasetRecorder | None = None,
) -> tuple[RunInterrupted | None, list[TaskWork]]:
    """Claims and runs blocks until the queue is drained or the run is stopped (the interruption is returned);
    `run_lanes`: app/evaluation.py's, which runs one block's work into `store`. With a `recorder` each block's
    steps are finalized before the block is marked done, so a finished block's steps survive a kill."""
    num_shards = eval_cfg.num_shards or 1
    regions = claim_blocks([t.key for t in parts.tasks], eval_cfg.n_episodes, num_shards)
    root = queue_dir(store.out_dir, identity, num_shards)
    built: list[Policy] = []

    def build_policy() -> Policy:
        if not built:
            built.append(parts.build_policy())
        return built[0]

    def run_block(work: list[TaskWork], guard: _Guarded) -> RunInterrupted | None:
        return run_lanes(cfg, eval_cfg, parts, store, work, build_policy, guard, False, pools)

    work: list[TaskWork] = []
    held: tuple[str, int] | None = None
    pools = PoolCache()
    with WorkQueue(root, regions, eval_cfg.shard_id, store.out_dir, eval_cfg.lease_s) as queue:
        done, speed = _Done(queue, recorder), _Speed(queue)
        try:
            while (claim := done.next_claim(held)) is not None:
                work, steps_only = _block_work(claim, queue, store, parts, recorder)
                guard = _Guarded(claim, store, recorder, steps_only)
                began = time.monotonic()
                if work[0].episodes and (stopped := run_block(work, guard)) is not None:
                    done.flush()
                    return stopped, work
                speed.ran(len(work[0].episodes), time.monotonic() - began)
                if guard.dropped:
                    log.warning("lost the claim of %s/%d episodes %d-%d to another job", *_where(claim))
                else:
                    done.add(claim)
                held = claim.block.key
            if built:
                built[0].finish()
            else:
                parts.policy.completed_unbuilt()
            store.drained = True
        except RunInterrupted as err:  # while waiting for a claim
            return err.with_traceback(None), work
        finally:
            pools.close()
            stop_worker_servers()
            store.write()  # whatever happened: the shard file, complete once the queue is drained
    return None, work


class _Speed:
    """This job's measured speed, published in the queue for the jobs' choices of blocks (rundir/queue.py): its
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

    def next_claim(self, held: tuple[str, int] | None) -> Claim | None:
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


def _block_work(
    claim: Claim, queue: WorkQueue, store: RunStore, parts: RunParts, recorder: DatasetRecorder | None
) -> tuple[list[TaskWork], set[tuple[str, int, int]]]:
    """The claimed block's episodes that neither this shard nor the block's earlier owners recorded, and, when
    recording, those recorded (here or by an earlier owner) whose steps a killed process lost: they run again for
    their steps. The second: the units recorded elsewhere, whose records go to the recorder only."""
    block = claim.block
    own = {u for u in store.done() if u[:2] == block.key and u[2] in block.episodes}
    dirs = queue.earlier_dirs(claim, store.out_dir)
    elsewhere = queue.recorded_in(claim, dirs)
    again: set[tuple[str, int, int]] = set()
    steps_only: set[tuple[str, int, int]] = set()
    if recorder is not None:
        steps_only = elsewhere - {u for d in dirs for u in stepped_units(d)} - recorder.stepped
        again = recorder.missing(own) | steps_only
    todo = [k for k in block.episodes if (*block.key, k) not in (own | elsewhere) - again]
    taken = f", taken over (generation {claim.gen})" if claim.gen else ""
    log.info("claimed %s/%d episodes %d-%d (%d to run)%s", *_where(claim), len(todo), taken)
    if again:
        log.info("%d of them recorded before, their steps lost with a killed job: run for their steps", len(again))
    task = next(t for t in parts.tasks if t.key == block.key)
    return [TaskWork(task, todo)], steps_only
