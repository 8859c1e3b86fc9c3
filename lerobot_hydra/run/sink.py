"""Where a run's records go: its run dir's store (`DirSink`, over store/run_store.py: episodes.jsonl, the shard file),
or, for the Python API without a run dir, memory (`MemorySink`). The run context and the sources of work read and
write either through `RecordSink`, and each publishes its own results (`Publication`)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from omegaconf import DictConfig

from lerobot_hydra.core.layout import EPISODES_FILE
from lerobot_hydra.core.records import EpisodeKey, EpisodeRecord, TaskKey, sort_records
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.loggers.base import ExperimentLogger, RunMeta
from lerobot_hydra.loggers.run_meta import shard_run, single_run
from lerobot_hydra.publish.publish import publish, publish_shard
from lerobot_hydra.results.aggregate import Results
from lerobot_hydra.rollout.plan import TaskBlock
from lerobot_hydra.rollout.signals import RunInterrupted
from lerobot_hydra.store.run_store import RunStore


@dataclass(frozen=True)
class Publication:
    """How a run's results are published: its loggers, what they log it as (`meta`; None: what its run dir says),
    the stop signal that cut it short and the episodes it owed (a stopped run says how many it kept)."""

    loggers: list[ExperimentLogger]
    meta: Callable[[], RunMeta] | None = None
    interrupted: RunInterrupted | None = None
    planned: int = 0


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

    def publish(self, results: Results, how: Publication) -> None:
        """The results as files, the table and the loggers (a stopped run: eval_info and the table only, quickly,
        its title saying it is partial)."""
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

    def publish(self, results: Results, how: Publication) -> None:
        """Only to loggers (W&B files, for a new run, under the working dir)."""
        if how.meta is not None:
            meta = how.meta()
            for logger in how.loggers:
                logger.log_results(results, Path.cwd(), meta, {})


class DirSink(RunStore):
    """The run dir's store of a run or shard of `cfg`, which publishes its results into the run dir."""

    def __init__(
        self,
        cfg: DictConfig,
        out_dir: Path,
        identity: dict[str, Any],
        shard_id: int,
        num_shards: int,
        tasks: list[TaskSpec],
        plan: list[TaskBlock],
        label: str,
        provenance: dict[str, Any] | None,
    ) -> None:
        super().__init__(out_dir, identity, shard_id, num_shards, tasks, plan, label, provenance)
        self.cfg, self.shard_id, self.num_shards, self.label = cfg, shard_id, num_shards, label

    def publish(self, results: Results, how: Publication) -> None:
        loggers, prefix, stopped = how.loggers, "", how.interrupted
        if stopped is not None:
            prefix, loggers = stopped.summarize(len(self.records), how.planned, self.out_dir / EPISODES_FILE), []
        meta = (how.meta or self._meta)() if loggers else None
        if self.num_shards == 1:
            title = prefix + "Evaluation results"
            publish(results, self.out_dir, title, loggers=loggers, run=meta, quick=stopped is not None)
        else:
            shard = f"Shard {self.shard_id} of {self.num_shards} ({self.path})"
            title = f"{prefix}{shard}; the sweep's merge has the full results"
            publish_shard(results, self.out_dir, title, loggers=loggers, run=meta, quick=stopped is not None)

    def _meta(self) -> RunMeta:
        if self.num_shards == 1:
            return single_run(self.cfg, self.out_dir, self.label)
        return shard_run(self.cfg, self.out_dir, self.shard_id, self.num_shards, self.label)
