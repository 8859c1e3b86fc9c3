"""Work units and shards: what a run (or shard k of N) evaluates, and each episode's seed.

The work of a run is the list of (task group, task id, episode index) units in task order: every episode
of the first task, then every episode of the second, and so on. Shard k of N takes the k-th of N contiguous
blocks of that list whose sizes differ by at most one (the first `len % N` blocks are one longer), so a shard
touches (and builds envs for) as few tasks as possible, and its plan is one block of episode indices per
task (`TaskBlock`), computed and stored in time and space proportional to its tasks. An episode's seed
depends only on the base seed and its index, so shards reproduce the unsharded run episode for episode.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lerobot_hydra.core.records import TaskKey
from lerobot_hydra.envs.base import TaskSpec


@dataclass
class TaskWork:
    """A task's episodes still to run, as a source of work hands them to the rollout."""

    task: TaskSpec
    episodes: list[int]  # episode indices still to run, ascending
    done: int = 0  # episodes of this task already recorded (resume)
    successes: int = 0


@dataclass(frozen=True)
class TaskBlock:
    """The episodes `first`..`last` (inclusive) of one task: a shard's part of that task."""

    task_group: str
    task_id: int
    first: int
    last: int

    @property
    def key(self) -> TaskKey:
        return (self.task_group, self.task_id)

    @property
    def episodes(self) -> range:
        return range(self.first, self.last + 1)

    def to_dict(self) -> dict[str, Any]:
        return {"task_group": self.task_group, "task_id": self.task_id, "first": self.first, "last": self.last}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskBlock:
        return cls(str(data["task_group"]), int(data["task_id"]), int(data["first"]), int(data["last"]))


def shard_bounds(n_units: int, shard_id: int, num_shards: int) -> tuple[int, int]:
    base, extra = divmod(n_units, num_shards)
    start = shard_id * base + min(shard_id, extra)
    return start, start + base + (1 if shard_id < extra else 0)


def shard_plan(task_keys: Sequence[TaskKey], n_episodes: int, shard_id: int, num_shards: int) -> list[TaskBlock]:
    """Shard `shard_id`'s contiguous block of the task-ordered units, as one block per task it touches; time and
    size grow with the tasks of the shard, not with its episodes. A task key listed twice is planned once."""
    if n_episodes <= 0:
        return []
    task_keys = list(dict.fromkeys(task_keys))
    start, stop = shard_bounds(len(task_keys) * n_episodes, shard_id, num_shards)
    blocks = []
    for i in range(start // n_episodes, -(-stop // n_episodes)):
        first, end = max(start - i * n_episodes, 0), min(stop - i * n_episodes, n_episodes)
        if first < end:
            blocks.append(TaskBlock(*task_keys[i], first, end - 1))
    return blocks


def plan_size(plan: Iterable[TaskBlock]) -> int:
    return sum(len(block.episodes) for block in plan)


def episode_seed(base_seed: int, episode_index: int) -> int:
    return base_seed + episode_index


def split_blocks(blocks: Sequence[TaskBlock], shard_id: int, num_shards: int) -> list[TaskBlock]:
    """Part `shard_id` of `num_shards` contiguous parts of the units of `blocks` (in their order), sizes differing by
    at most one, as `shard_plan` splits a whole run; time grows with the blocks, not with their episodes."""
    start, stop = shard_bounds(plan_size(blocks), shard_id, num_shards)
    out, offset = [], 0
    for block in blocks:
        n = len(block.episodes)
        first, end = max(start - offset, 0), min(stop - offset, n)
        if first < end:
            out.append(TaskBlock(block.task_group, block.task_id, block.first + first, block.first + end - 1))
        offset += n
    return out


def claim_blocks(task_keys: Sequence[TaskKey], n_episodes: int, num_shards: int) -> list[list[TaskBlock]]:
    """The blocks a dynamic sweep's shards claim over every episode of the run (`claim_regions`)."""
    keys = list(dict.fromkeys(task_keys))
    return claim_regions([TaskBlock(*key, 0, n_episodes - 1) for key in keys if n_episodes > 0], num_shards)


def claim_regions(work: Sequence[TaskBlock], num_shards: int) -> list[list[TaskBlock]]:
    """The blocks a dynamic sweep's shards claim (store/queue.py), per shard region: region k is the k-th
    contiguous part of `work` (`split_blocks`), cut into blocks that never cross a task and shrink towards the
    region's end (1 / (4 N) of what remains of the region, at least one episode). A shard works through its own
    region from the front; a shard that ran out takes blocks from the back of the others, so the last blocks claimed
    are the smallest."""
    regions = []
    for shard_id in range(num_shards):
        parts = split_blocks(work, shard_id, num_shards)
        remaining = plan_size(parts)
        blocks: list[TaskBlock] = []
        for part in parts:
            first = part.first
            while first <= part.last:
                last = min(first + max(1, -(-remaining // (4 * num_shards))) - 1, part.last)
                blocks.append(TaskBlock(part.task_group, part.task_id, first, last))
                remaining -= last - first + 1
                first = last + 1
        regions.append(blocks)
    return regions
