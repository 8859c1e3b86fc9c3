"""A run's directory on disk: episodes flushed as they finish, the shard file, session times, and resume.

The run holds the directory's lock (lock.py) from start to end, so no second process writes there.
`episodes.jsonl` is appended and fsynced per episode and is the source of truth. The shard file
(shard_file.py) holds the config fingerprint, the tasks and the plan (per task, the first and last episode
index of the shard's contiguous block); it is written atomically once when the run first starts (so a started
shard is never mistaken for a missing one) and once more at the end, then with `complete`, `eval_s` and every record.
`sessions.json` holds the evaluation time of every session that ran in the dir (rewritten by a heartbeat
every few seconds), so time spent by a killed session still counts in `eval_s`. Resuming drops a torn last
line of episodes.jsonl, deletes the temporary files a kill left behind, rebuilds a corrupt shard file from
the records, and runs the rest.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from lerobot_hydra.core.durable import read_json_object, remove_temporaries, write_json_atomic
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.layout import EPISODES_FILE, SESSIONS_FILE
from lerobot_hydra.core.records import (
    EpisodeKey,
    EpisodeRecord,
    TaskKey,
    append_jsonl,
    latest_by_unit,
    read_jsonl,
    sort_records,
)
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.publish.video import remove_partial_videos, without_missing_videos
from lerobot_hydra.rollout.plan import TaskBlock
from lerobot_hydra.rollout.provenance import check_resumed_versions
from lerobot_hydra.store.lock import DirLock
from lerobot_hydra.store.shard_file import ShardFile, ShardFormatError, fingerprint

log = logging.getLogger("lerobot_hydra")

# How often sessions.json is rewritten: a killed session's last seconds up to this are not counted.
HEARTBEAT_S = 5.0


def diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out.extend(diff_keys(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else str(key)))
        return out
    return [] if a == b else [prefix or "<root>"]


class RunStore:
    """Opening it locks `out_dir` (UserError when another process holds it) until `close()`."""

    def __init__(
        self,
        out_dir: Path,
        identity: dict[str, Any],
        shard_id: int,
        num_shards: int,
        tasks: list[TaskSpec],
        plan: list[TaskBlock],
        label: str,
        provenance: dict[str, Any] | None = None,
    ) -> None:
        self.out_dir = out_dir
        self.shard_file = ShardFile.of(out_dir, shard_id, num_shards)
        self.path = self.shard_file.path
        self.episodes_path = out_dir / EPISODES_FILE
        self.sessions_path = out_dir / SESSIONS_FILE
        self.identity, self.fingerprint, self.provenance = identity, fingerprint(identity), provenance
        self.header = self.shard_file.header(identity, label, tasks, plan, provenance)
        self._task_order = [t.key for t in tasks]
        self.plan = list(plan)
        self._plan = {block.key: block.episodes for block in plan}
        self._lock = DirLock(out_dir, "an evaluation").acquire()
        self._heartbeat_stop = threading.Event()
        self._sessions_lock = threading.Lock()
        try:
            self._open()
        except BaseException:
            self._lock.release()
            raise
        self._heartbeat = threading.Thread(target=self._beat, name="lerobot_hydra-heartbeat", daemon=True)
        self._heartbeat.start()

    def _open(self) -> None:
        leftovers = remove_temporaries(self.out_dir) + remove_partial_videos(self.out_dir)
        if leftovers:
            names = ", ".join(str(p.relative_to(self.out_dir)) for p in leftovers[:3])
            log.info("deleted %d half-written file(s) a killed run left in %s: %s", len(leftovers), self.out_dir, names)
        corrupt = self._check_previous()
        _drop_torn_tail(self.episodes_path)
        by_unit = latest_by_unit(r for r in read_jsonl(self.episodes_path) if self.planned(r.unit))
        self._records: list[EpisodeRecord] = list(by_unit.values())
        self._errored = {unit for unit, r in by_unit.items() if r.errored}  # error episodes run again
        self._units = set(by_unit) - self._errored
        self.resumed = len(self._units)
        self._previous_sessions = self._read_sessions(corrupt is not None)
        self._session = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        self._started = time.monotonic()
        self._stopped: float | None = None  # when the final shard file was written: the clock stops there
        if corrupt is not None:
            log.info(
                "%s %s; rebuilt it from %s (%d episodes recorded)", self.path, corrupt, EPISODES_FILE, self.resumed
            )
        if corrupt is not None or not self.path.exists():
            self.shard_file.start(self.header)
        self._write_sessions()

    def _check_previous(self) -> str | None:
        """Refuses a dir that holds another shard or configuration; returns why the shard file must be rebuilt
        (it is corrupt), or None."""
        others = self.shard_file.others_in_dir()
        if others:
            raise UserError(
                f"{self.out_dir} holds results of another shard ({others[0].name}); give this run its own output dir"
            )
        if not self.path.exists():
            if self.episodes_path.exists() and read_jsonl(self.episodes_path):
                raise UserError(f"{self.episodes_path} exists without {self.path.name}; use a new output directory")
            return None
        try:
            previous = self.shard_file.started_run()
        except ShardFormatError as err:
            raise UserError(
                f"{self.path} {err}; resume it with the version that started it, or choose a new output directory"
            ) from err
        except ValueError as err:
            return f"was unreadable ({err})"
        self._check_identity(previous.fingerprint, previous.identity)
        check_resumed_versions(self.out_dir, previous.provenance, self.provenance)
        return None

    def _check_identity(self, found: Any, identity: Any) -> None:
        if found != self.fingerprint:
            changed = diff_keys(identity if isinstance(identity, dict) else {}, self.identity)
            raise UserError(
                f"{self.out_dir} holds results of a different configuration (differs in: {', '.join(changed[:5])}); "
                "resume with the same config or choose a new output directory"
            )

    def _read_sessions(self, check_identity: bool) -> list[dict[str, Any]]:
        """Earlier sessions in this dir; with `check_identity` (no shard file to tell) also refuses a dir whose
        sessions ran another configuration."""
        if not self.sessions_path.exists():
            return []
        try:
            data = read_json_object(self.sessions_path)
            sessions = [dict(s, eval_s=float(s["eval_s"])) for s in data["sessions"]]
        except (ValueError, KeyError, TypeError) as err:
            log.warning("%s is unreadable (%r); eval_s counts this session only", self.sessions_path, err)
            return []
        if check_identity:
            self._check_identity(data.get("fingerprint"), data.get("identity", {}))
        return sessions

    def planned(self, unit: EpisodeKey) -> bool:
        episodes = self._plan.get(unit[:2])
        return episodes is not None and unit[2] in episodes

    @property
    def records(self) -> tuple[EpisodeRecord, ...]:
        return tuple(self._records)

    def done(self) -> set[EpisodeKey]:
        return set(self._units)

    def recorded_per_task(self) -> tuple[Counter[TaskKey], Counter[TaskKey]]:
        """(episodes, successes) recorded so far, per task key; error episodes not counted."""
        episodes: Counter[TaskKey] = Counter()
        successes: Counter[TaskKey] = Counter()
        for r in self._records:
            if r.errored:
                continue
            episodes[r.task_key] += 1
            successes[r.task_key] += int(r.success)
        return episodes, successes

    def add(self, record: EpisodeRecord) -> bool:
        """Appends (and fsyncs) `record`; False, and nothing written, when its episode is recorded already (an
        error episode's record is replaced by its rerun's)."""
        if record.unit in self._units:
            return False
        if not record.errored:
            self._units.add(record.unit)
        append_jsonl(self.episodes_path, record)
        if record.unit in self._errored:
            self._records = [r for r in self._records if r.unit != record.unit]
        self._errored.discard(record.unit)
        if record.errored:
            self._errored.add(record.unit)
        self._records.append(record)
        return True

    def sorted_records(self) -> list[EpisodeRecord]:
        return sort_records(self._records, self._task_order)

    def drop_missing_videos(self) -> None:
        """Records whose video was never written (encoding failed, the run was stopped first) lose its path."""
        self._records[:] = without_missing_videos(self._records, self.out_dir)

    @property
    def eval_s(self) -> float:
        """Seconds spent evaluating, summed over every session in this dir (killed and resumed ones included)."""
        return sum(s["eval_s"] for s in self._previous_sessions) + self._elapsed()

    def _elapsed(self) -> float:
        return (self._stopped or time.monotonic()) - self._started

    def write(self, complete: bool, stops: dict[TaskKey, int] | None = None) -> None:
        """The full shard file, at the end: header, `complete`, `eval_s`, every record and the tasks sequential
        stopping stopped (`stops`: task -> the episodes it stopped after)."""
        self._stopped = time.monotonic()
        eval_s = self._write_sessions()
        self.shard_file.finish(self.header, complete, eval_s, self.sorted_records(), stops)

    def close(self) -> None:
        """Stops the heartbeat, records this session's time and lets go of the dir."""
        self._heartbeat_stop.set()
        self._heartbeat.join()
        self._write_sessions()
        self._lock.release()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_sessions(self) -> float:
        with self._sessions_lock:
            elapsed = self._elapsed()
            sessions = [*self._previous_sessions, {**self._session, "eval_s": round(elapsed, 3)}]
            data = {
                "fingerprint": self.fingerprint,
                "identity": self.identity,
                "sessions": sessions,
            }
            write_json_atomic(self.sessions_path, data)
            return sum(s["eval_s"] for s in self._previous_sessions) + elapsed

    def _beat(self) -> None:
        while not self._heartbeat_stop.wait(HEARTBEAT_S):
            try:
                self._write_sessions()
            except OSError as err:  # a full disk must not kill the run; the records are what matters
                log.warning("could not update %s: %s", self.sessions_path, err)


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
