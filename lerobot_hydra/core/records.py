"""Episode records: the one thing every sink, merge and resume reads."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The one definition of each key: a task is (task group, task id); an episode is (task group, task id, index).
TaskKey = tuple[str, int]
EpisodeKey = tuple[str, int, int]


@dataclass(frozen=True)
class EpisodeRecord:
    task_group: str
    task_id: int
    task_name: str
    task: str
    episode_index: int
    seed: int
    success: bool
    sum_reward: float
    max_reward: float
    steps: int
    wall_s: float
    init_state_id: int | None = None
    video_path: str | None = None
    # An error episode (its simulator raised, or returned a non-finite reward or observation, on two attempts):
    # the exception's one line, and the step it happened at (0: the reset). Counted apart from the evaluated
    # episodes (results/aggregate.py), and run again by a rerun.
    error: str | None = None
    error_step: int | None = None
    # A chunked policy's inferences (policies/clock.py; None for other policies): how many, the control steps and
    # milliseconds each cost on the run's eval.clock (latency_ms: None in lockstep), the wall time of the forward
    # pass each was part of (like wall_s, not reproducible), and the steps the row held its last action.
    inferences: int | None = None
    latency_steps: list[int] | None = None
    latency_ms: list[float] | None = None
    infer_ms: list[float] | None = None
    held_steps: int | None = None
    # Why this episode cannot be run again to the same outcome (eval.clock.mode=measured: its latencies are this
    # device's wall times); None: it can, from its seed, task and episode index.
    not_reproducible: str | None = None

    @property
    def errored(self) -> bool:
        return self.error is not None

    @property
    def unit(self) -> EpisodeKey:
        return (self.task_group, self.task_id, self.episode_index)

    @property
    def task_key(self) -> TaskKey:
        return (self.task_group, self.task_id)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def append_jsonl(path: Path, record: EpisodeRecord) -> None:
    """Append one record and push it to disk, so a killed run loses only the episodes in flight."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record.to_dict(), allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path) -> list[EpisodeRecord]:
    """Records of a jsonl file; a torn last line (the process died mid-write) is ignored."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(EpisodeRecord.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue
    return records


def latest_by_unit(records: Iterable[EpisodeRecord]) -> dict[EpisodeKey, EpisodeRecord]:
    """One record per episode: an evaluated record wins over an error record of the same episode (a rerun retried
    it), else the later one wins."""
    out: dict[EpisodeKey, EpisodeRecord] = {}
    for record in records:
        kept = out.get(record.unit)
        if kept is None or kept.errored or not record.errored:
            out[record.unit] = record
    return out


def sort_records(records: Iterable[EpisodeRecord], task_order: list[TaskKey]) -> list[EpisodeRecord]:
    rank = {key: i for i, key in enumerate(task_order)}
    return sorted(
        records,
        key=lambda r: (rank.get((r.task_group, r.task_id), len(rank)), r.task_group, r.task_id, r.episode_index),
    )
