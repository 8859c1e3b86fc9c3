"""The shard file, `shard_<k>_of_<N>.json` in a run dir: its schema (`SHARD_FORMAT`), written and read by
`ShardFile` only.

The run store (store.py) writes it when a run first starts (the header: fingerprint, identity, tasks, plan,
provenance; `complete` false) and once more at the end (then with `complete`, `eval_s` and every record); the
merge finds and loads them. A shard file is only ever replaced whole (durable.py), so it is read complete or
not at all; whether its run dir is locked by a live process (lock.py) says whether the shard is still running.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lerobot_hydra.core.commands import hydra_override, shell_command
from lerobot_hydra.core.durable import read_json_object, write_json_atomic
from lerobot_hydra.core.labels import is_shard_override
from lerobot_hydra.core.layout import (
    EPISODES_FILE,
    HYDRA_DIR,
    HYDRA_HYDRA_FILE,
    HYDRA_OVERRIDES_FILE,
    SHARD_FILE_GLOB,
    parse_shard_file_name,
    shard_file_name,
)
from lerobot_hydra.core.records import EpisodeRecord, TaskKey
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.rollout.plan import TaskBlock
from lerobot_hydra.store.lock import holder_if_locked

SHARD_FORMAT = "lerobot_hydra.shard/2"
SHARD_FORMAT_FAMILY = "lerobot_hydra.shard/"


class ShardFileError(Exception):
    """A shard file that cannot be used at all (unreadable, not JSON, not a shard file)."""


class ShardFormatError(Exception):
    """A JSON object that is not a shard file of this version; its message says what it is instead."""


def fingerprint(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Shard:
    path: Path
    shard_id: int
    num_shards: int
    fingerprint: str
    identity: dict[str, Any]
    label: str
    complete: bool
    eval_s: float
    task_keys: list[TaskKey]
    plan: list[TaskBlock]
    records: list[EpisodeRecord]
    # Who is writing its dir right now (a live process holds the dir's lock), or None.
    running: str | None = None
    # What made it (lerobot_hydra.rollout.provenance); None in shard files written before it was recorded.
    provenance: dict[str, Any] | None = None
    # Tasks that sequential stopping (eval.sequential) stopped, and after how many of their episodes.
    stopped: dict[TaskKey, int] = field(default_factory=dict)

    def planned_blocks(self) -> dict[TaskKey, range]:
        """Each task's planned episodes, a stopped task's cut at its stop."""
        blocks = {b.key: b.episodes for b in self.plan}
        for key, n in self.stopped.items():
            if key in blocks:
                blocks[key] = range(blocks[key].start, max(blocks[key].start, min(blocks[key].stop, n)))
        return blocks

    @property
    def dir(self) -> Path:
        return self.path.parent

    @property
    def name(self) -> str:
        return f"shard {self.shard_id} of {self.num_shards}"


@dataclass(frozen=True)
class StartedRun:
    """What a shard file says about the run that started it, read leniently for a resume's checks: a field the
    file lacks reads as None (the fingerprint, provenance) or {} (the identity), and then differs from this run's."""

    fingerprint: Any
    identity: Any
    provenance: Any


class ShardFile:
    """One run dir's shard file: `header()` builds what `start()` and `finish()` write, `started_run()` and
    `load()` read it back; no other code knows its fields."""

    def __init__(self, path: Path) -> None:
        ids = parse_shard_file_name(path.name)
        if ids is None:
            raise ValueError(f"{path.name} is not a shard file name")
        self.path = path
        self.shard_id, self.num_shards = ids

    @classmethod
    def of(cls, run_dir: Path, shard_id: int, num_shards: int) -> ShardFile:
        return cls(run_dir / shard_file_name(shard_id, num_shards))

    def others_in_dir(self) -> list[Path]:
        """Shard files of other shards beside this one."""
        return sorted(p for p in self.path.parent.glob(SHARD_FILE_GLOB) if p != self.path)

    def header(
        self,
        identity: dict[str, Any],
        label: str,
        tasks: Sequence[TaskSpec],
        plan: Sequence[TaskBlock],
        provenance: dict[str, Any] | None,
    ) -> dict[str, Any]:
        return {
            "format": SHARD_FORMAT,
            "shard_id": self.shard_id,
            "num_shards": self.num_shards,
            "fingerprint": fingerprint(identity),
            "identity": identity,
            "label": label,
            "tasks": [
                {"task_group": t.task_group, "task_id": t.task_id, "name": t.name, "task": t.description} for t in tasks
            ],
            "plan": [block.to_dict() for block in plan],
            "provenance": provenance,
        }

    def start(self, header: dict[str, Any]) -> None:
        """The file of a started run: its header, not complete, without records (they go to episodes.jsonl)."""
        write_json_atomic(self.path, {**header, "complete": False})

    def finish(
        self,
        header: dict[str, Any],
        complete: bool,
        eval_s: float,
        records: list[EpisodeRecord],
        stopped: dict[TaskKey, int] | None = None,
    ) -> None:
        """The full file at a run's end: header, `complete`, `eval_s`, every record (sorted) and the tasks
        sequential stopping stopped."""
        data = {**header, "complete": complete, "eval_s": eval_s, "episodes": [r.to_dict() for r in records]}
        if stopped:
            data["stopped"] = [{"task_group": g, "task_id": t, "n_episodes": n} for (g, t), n in stopped.items()]
        write_json_atomic(self.path, data)

    def started_run(self) -> StartedRun:
        """What the run that wrote the file was; raises as `read()`."""
        data = self.read()
        return StartedRun(data.get("fingerprint"), data.get("identity", {}), data.get("provenance"))

    def read(self) -> dict[str, Any]:
        """The file's object, of this format. OSError: unreadable; ValueError: not a JSON object; ShardFormatError:
        written by another version of lerobot_hydra, or not a shard file."""
        data = read_json_object(self.path)
        found = data.get("format")
        if found == SHARD_FORMAT:
            return data
        if isinstance(found, str) and found.startswith(SHARD_FORMAT_FAMILY):
            raise ShardFormatError(
                f"was written by another version of lerobot_hydra (format {found}, this one reads {SHARD_FORMAT})"
            )
        raise ShardFormatError(f"is not a {SHARD_FORMAT} file")

    def load(self) -> Shard:
        """The shard, every field checked; a ShardFileError says what is wrong and how to go on."""
        path = self.path
        try:
            data = self.read()
        except OSError as err:
            raise ShardFileError(f"{path} cannot be read ({err}); re-run that shard") from err
        except ValueError as err:
            raise ShardFileError(
                f"{path} is not valid JSON ({err}); re-run that shard in place, which rebuilds it from the "
                f"{EPISODES_FILE} beside it and keeps every recorded episode: "
                f"{rerun_in_place(path.parent, self.shard_id, self.num_shards)}"
            ) from err
        except ShardFormatError as err:
            raise ShardFileError(
                f"{path} {err}; merge it with the version that wrote it, or move it out of the sweep dir"
            ) from err
        try:
            shard = Shard(
                path=path,
                shard_id=int(data["shard_id"]),
                num_shards=int(data["num_shards"]),
                fingerprint=str(data["fingerprint"]),
                identity=dict(data["identity"]),
                label=str(data.get("label", "")),
                complete=bool(data["complete"]),
                eval_s=float(data.get("eval_s", 0.0)),
                task_keys=[(str(t["task_group"]), int(t["task_id"])) for t in data["tasks"]],
                plan=[TaskBlock.from_dict(b) for b in data["plan"]],
                # Written with the records only at its end; a shard still running or killed has them in episodes.jsonl.
                records=[EpisodeRecord.from_dict(r) for r in data.get("episodes", [])],
                running=holder_if_locked(path.parent),
                provenance=data.get("provenance"),
                stopped={
                    (str(x["task_group"]), int(x["task_id"])): int(x["n_episodes"]) for x in data.get("stopped", ())
                },
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ShardFileError(f"{path} lacks or garbles a field ({err!r}); re-run that shard") from err
        if (shard.shard_id, shard.num_shards) != (self.shard_id, self.num_shards):
            raise ShardFileError(
                f"{path} holds shard {shard.shard_id} of {shard.num_shards}, not what its name says; re-run that shard"
            )
        return shard


def find_shard_files(sweep_dir: Path) -> list[Path]:
    """Every shard file under `sweep_dir`, outside hidden folders (.submitit, .hydra)."""
    found = []
    for path in sweep_dir.rglob(SHARD_FILE_GLOB):
        relative = path.relative_to(sweep_dir).parts
        if parse_shard_file_name(path.name) and not any(part.startswith(".") for part in relative):
            found.append(path)
    return sorted(found)


def load_shard(path: Path) -> Shard:
    """The shard file at `path` (one that `find_shard_files` found)."""
    return ShardFile(path).load()


def rerun_in_place(run_dir: Path, shard_id: int, num_shards: int) -> str:
    """The foreground command that resumes the shard in `run_dir` with the overrides Hydra saved there."""
    task_overrides, _ = saved_overrides(run_dir)
    kept = [o for o in task_overrides or [] if not is_shard_override(o)]
    location = hydra_override("hydra.run.dir", str(run_dir))
    command = shell_command(
        ["python", "eval.py", location, *kept, f"eval.shard_id={shard_id}", f"eval.num_shards={num_shards}"]
    )
    return command if task_overrides is not None else f"{command} <the overrides it ran with>"


def saved_overrides(run_dir: Path) -> tuple[list[str] | None, list[str]]:
    """(task overrides, hydra overrides) Hydra saved for a run, or (None, []) when it saved none."""
    import yaml

    try:
        task = yaml.safe_load((run_dir / HYDRA_DIR / HYDRA_OVERRIDES_FILE).read_text())
    except (OSError, yaml.YAMLError):
        return None, []
    try:
        hydra_cfg = yaml.safe_load((run_dir / HYDRA_DIR / HYDRA_HYDRA_FILE).read_text())
        hydra_overrides = list(hydra_cfg["hydra"]["overrides"]["hydra"] or [])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        hydra_overrides = []
    return [str(o) for o in task or []], [str(o) for o in hydra_overrides]
