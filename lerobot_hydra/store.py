"""A run's directory on disk: episodes flushed as they finish, the shard file, and resume.

`episodes.jsonl` is appended and fsynced per episode and is what resume trusts. `shard_<k>_of_<N>.json`
carries the config fingerprint, the planned units and the records; it is written atomically when the run
starts (so a started shard is never mistaken for a missing one), at most every few seconds while running,
and at the end, and is marked complete when every planned unit is done. A run killed at any point loses
only the episodes in flight: resuming reads episodes.jsonl, drops a torn last line, and runs the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.errors import UserError
from lerobot_hydra.records import EpisodeRecord, append_jsonl, read_jsonl, sort_records, write_json_atomic
from lerobot_hydra.sharding import WorkUnit

SHARD_FORMAT = "lerobot_hydra.shard/1"
EPISODES_FILE = "episodes.jsonl"
WRITE_INTERVAL_S = 5.0


def shard_file_name(shard_id: int, num_shards: int) -> str:
    return f"shard_{shard_id}_of_{num_shards}.json"


def fingerprint(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out.extend(diff_keys(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else str(key)))
        return out
    return [] if a == b else [prefix or "<root>"]


class RunStore:
    def __init__(
        self,
        out_dir: Path,
        identity: dict[str, Any],
        shard_id: int,
        num_shards: int,
        tasks: list[TaskSpec],
        planned: list[WorkUnit],
        label: str,
    ) -> None:
        self.out_dir = out_dir
        self.path = out_dir / shard_file_name(shard_id, num_shards)
        self.episodes_path = out_dir / EPISODES_FILE
        self.header: dict[str, Any] = {
            "format": SHARD_FORMAT,
            "shard_id": shard_id,
            "num_shards": num_shards,
            "fingerprint": fingerprint(identity),
            "identity": identity,
            "label": label,
            "tasks": [
                {"task_group": t.group, "task_id": t.task_id, "name": t.name, "task": t.description} for t in tasks
            ],
            "planned_units": [list(u.key) for u in planned],
        }
        self._task_order = [t.key for t in tasks]
        self._planned = {u.key for u in planned}
        self.previous_eval_s = 0.0
        self._check_previous(out_dir)
        _drop_torn_tail(self.episodes_path)
        by_unit = {r.unit: r for r in read_jsonl(self.episodes_path) if r.unit in self._planned}
        self.records: list[EpisodeRecord] = list(by_unit.values())
        self.resumed = len(self.records)
        self._started = time.monotonic()
        self._last_write = 0.0
        out_dir.mkdir(parents=True, exist_ok=True)
        self.write()

    def _check_previous(self, out_dir: Path) -> None:
        others = [p for p in out_dir.glob("shard_*_of_*.json") if p != self.path]
        if others:
            raise UserError(
                f"{out_dir} holds results of another shard ({others[0].name}); give this run its own output dir"
            )
        if not self.path.exists():
            if self.episodes_path.exists() and read_jsonl(self.episodes_path):
                raise UserError(f"{self.episodes_path} exists without {self.path.name}; use a new output directory")
            return
        try:
            previous = json.loads(self.path.read_text())
        except json.JSONDecodeError as err:
            raise UserError(
                f"{self.path} is not valid JSON ({err}); delete it and {EPISODES_FILE} to start over"
            ) from err
        if not isinstance(previous, dict) or previous.get("format") != SHARD_FORMAT:
            raise UserError(f"{self.path} is not a {SHARD_FORMAT} file; choose a new output directory")
        if previous.get("fingerprint") != self.header["fingerprint"]:
            changed = diff_keys(previous.get("identity", {}), self.header["identity"])
            raise UserError(
                f"{self.out_dir} holds results of a different configuration (differs in: {', '.join(changed[:5])}); "
                "resume with the same config or choose a new output directory"
            )
        self.previous_eval_s = float(previous.get("eval_s", 0.0))

    def done(self) -> set[tuple[str, int, int]]:
        return {r.unit for r in self.records}

    def add(self, record: EpisodeRecord) -> None:
        append_jsonl(self.episodes_path, record)
        self.records.append(record)
        if time.monotonic() - self._last_write > WRITE_INTERVAL_S:
            self.write()

    def sorted_records(self) -> list[EpisodeRecord]:
        return sort_records(self.records, self._task_order)

    @property
    def complete(self) -> bool:
        return self.done() >= self._planned

    @property
    def eval_s(self) -> float:
        """Seconds spent evaluating, summed over every session of this shard (resumes included)."""
        return self.previous_eval_s + time.monotonic() - self._started

    def write(self) -> None:
        data = {
            **self.header,
            "complete": self.complete,
            "eval_s": self.eval_s,
            "episodes": [r.to_dict() for r in self.sorted_records()],
        }
        write_json_atomic(self.path, data)
        self._last_write = time.monotonic()


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line that a killed run left half-written, so the next append starts on a line of its own."""
    if not path.exists():
        return
    with open(path, "rb+") as f:
        data = f.read()
        if not data or data.endswith(b"\n"):
            return
        f.truncate(data.rfind(b"\n") + 1)
        f.flush()
        os.fsync(f.fileno())
