"""Where a run's records go: its run dir's store (rundir/store.py: episodes.jsonl, the shard file), or, for the
Python API without a run dir, memory. The run context and the sources of work read and write either through
`RecordSink`."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from lerobot_hydra.core.records import EpisodeKey, EpisodeRecord, TaskKey, sort_records


class RecordSink(Protocol):
    out_dir: Path | None  # the run dir, or None in memory
    provenance: dict[str, Any] | None
    plan: list[Any]  # the TaskBlocks it accepts records of
    resumed: int  # records found when it opened (a resumed run dir)

    def add(self, record: EpisodeRecord) -> bool:
        """Keeps `record` (flushed to disk in a run dir); False when its episode is kept already."""
        ...

    @property
    def records(self) -> tuple[EpisodeRecord, ...]: ...

    def done(self) -> set[EpisodeKey]:
        """The episodes recorded, error episodes left out (they run again)."""
        ...

    def recorded_per_task(self) -> tuple[Counter[TaskKey], Counter[TaskKey]]: ...

    def sorted_records(self) -> list[EpisodeRecord]: ...

    @property
    def eval_s(self) -> float: ...

    def drop_missing_videos(self) -> None: ...

    def write(self, complete: bool, stops: dict[TaskKey, int] | None = None) -> None:
        """The run's final state (the shard file, in a run dir)."""
        ...


class MemorySink:
    """The records of a run without a run dir (the Python API without `out_dir`)."""

    out_dir: Path | None = None
    resumed = 0

    def __init__(self, task_order: list[TaskKey], plan: list[Any], provenance: dict[str, Any] | None) -> None:
        self.plan, self.provenance = plan, provenance
        self._task_order = task_order
        self._records: dict[EpisodeKey, EpisodeRecord] = {}
        self._started = time.monotonic()
        self._stopped: float | None = None

    def add(self, record: EpisodeRecord) -> bool:
        kept = self._records.get(record.unit)
        if kept is not None and not kept.errored:
            return False
        self._records[record.unit] = record
        return True

    @property
    def records(self) -> tuple[EpisodeRecord, ...]:
        return tuple(self._records.values())

    def done(self) -> set[EpisodeKey]:
        return {unit for unit, r in self._records.items() if not r.errored}

    def recorded_per_task(self) -> tuple[Counter[TaskKey], Counter[TaskKey]]:
        episodes: Counter[TaskKey] = Counter(r.task_key for r in self._records.values() if not r.errored)
        successes: Counter[TaskKey] = Counter(r.task_key for r in self._records.values() if r.success)
        return episodes, successes

    def sorted_records(self) -> list[EpisodeRecord]:
        return sort_records(self._records.values(), self._task_order)

    @property
    def eval_s(self) -> float:
        return (self._stopped or time.monotonic()) - self._started

    def drop_missing_videos(self) -> None:
        """Nothing is filmed without a run dir."""

    def write(self, complete: bool, stops: dict[TaskKey, int] | None = None) -> None:
        self._stopped = time.monotonic()
