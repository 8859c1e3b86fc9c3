"""Work units and shards.

The work of a run is the list of (task group, task id, episode index) units in task order. Shard k of N
takes the k-th of N contiguous blocks whose sizes differ by at most one, so a shard touches (and builds
envs for) as few tasks as possible. An episode's seed depends only on the base seed and its index, so
shards reproduce the unsharded run episode for episode.
"""

from __future__ import annotations

from dataclasses import dataclass

from lerobot_hydra.envs.base import TaskSpec


@dataclass(frozen=True)
class WorkUnit:
    task_group: str
    task_id: int
    episode_index: int

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.task_group, self.task_id, self.episode_index)


def plan_units(tasks: list[TaskSpec], n_episodes: int) -> list[WorkUnit]:
    return [WorkUnit(t.group, t.task_id, k) for t in tasks for k in range(n_episodes)]


def shard_bounds(n_units: int, shard_id: int, num_shards: int) -> tuple[int, int]:
    base, extra = divmod(n_units, num_shards)
    start = shard_id * base + min(shard_id, extra)
    return start, start + base + (1 if shard_id < extra else 0)


def shard_units(units: list[WorkUnit], shard_id: int, num_shards: int) -> list[WorkUnit]:
    start, stop = shard_bounds(len(units), shard_id, num_shards)
    return units[start:stop]


def episode_seed(base_seed: int, episode_index: int) -> int:
    return base_seed + episode_index
