"""Work units, shards, and how a sweep's shard jobs are named.

The work of a run is the list of (task group, task id, episode index) units in task order: every episode
of the first task, then every episode of the second, and so on. Shard k of N takes the k-th of N contiguous
blocks of that list whose sizes differ by at most one (the first `len % N` blocks are one longer), so a shard
touches (and builds envs for) as few tasks as possible, and its plan is one block of episode indices per
task (`TaskBlock`), computed and stored in time and space proportional to its tasks. An episode's seed
depends only on the base seed and its index, so shards reproduce the unsharded run episode for episode.

In a multirun, jobs that differ only in their shard form one combination; its label is the job's other
overrides. A shard job's directory is `<label dir>/shard_<k>_of_<N>` under the sweep dir, a function of its
overrides alone, so re-running a shard with the same overrides and `hydra.sweep.dir` resumes it in place.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

SHARD_KEYS = ("eval.shard_id", "eval.num_shards")
# Longer labels are cut and suffixed with a hash to keep directory names well under filesystem limits.
MAX_LABEL_DIR_CHARS = 120


@dataclass(frozen=True)
class TaskBlock:
    """The episodes `first`..`last` (inclusive) of one task: a shard's part of that task."""

    task_group: str
    task_id: int
    first: int
    last: int

    @property
    def key(self) -> tuple[str, int]:
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


def shard_plan(
    task_keys: Sequence[tuple[str, int]], n_episodes: int, shard_id: int, num_shards: int
) -> list[TaskBlock]:
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


def is_shard_override(override: str) -> bool:
    return override.lstrip("+~").split("=", 1)[0] in SHARD_KEYS


def combination_label(overrides: Iterable[str]) -> str:
    """A job's overrides other than the shard ones, sorted: names its combination in a sweep."""
    return ",".join(sorted(o for o in overrides if not is_shard_override(o)))


def split_label(label: str) -> list[str]:
    """The overrides of a label: split at the commas that are not inside brackets, braces or quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(label):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(label[start:i])
            start = i + 1
    parts.append(label[start:])
    return [p for p in parts if p]


def distinguishing_labels(labels: Sequence[str]) -> list[str]:
    """Each label without the overrides every label shares: what tells the combinations of a sweep apart."""
    split = [split_label(label) for label in labels]
    common = set.intersection(*(set(s) for s in split)) if split else set()
    return [",".join(o for o in s if o not in common) for s in split]


def label_dir_name(label: str) -> str:
    """A directory name for a combination label: '/' and '%' escaped, long labels cut and hashed."""
    name = label.replace("%", "%25").replace("/", "%2F")
    if len(name) > MAX_LABEL_DIR_CHARS:
        digest = hashlib.sha256(label.encode()).hexdigest()[:10]
        name = f"{name[: MAX_LABEL_DIR_CHARS - 11]}-{digest}"
    return name


def shard_dir_name(shard_id: int, num_shards: int) -> str:
    return f"shard_{shard_id}_of_{num_shards}"


def job_subdir(job_num: int, shard_id: int, num_shards: int | None, overrides: Sequence[str]) -> str:
    """`hydra.sweep.subdir`: `[<label dir>/]shard_<k>_of_<N>` for a shard job, Hydra's job number otherwise."""
    if not num_shards or num_shards <= 1:
        return str(job_num)
    shard_dir = shard_dir_name(shard_id, num_shards)
    label = combination_label(overrides)
    return f"{label_dir_name(label)}/{shard_dir}" if label else shard_dir
