"""Shard files on disk: finding them under a sweep dir and reading one into a `Shard`.

A shard file is only ever replaced whole (durable.py), so it is read complete or not at all; whether its
run dir is locked by a live process (runlock.py) says whether the shard is still running.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lerobot_hydra.core.commands import hydra_override, shell_command
from lerobot_hydra.core.labels import is_shard_override
from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.core.runlock import holder_if_locked
from lerobot_hydra.rollout.plan import TaskBlock
from lerobot_hydra.sinks.store import EPISODES_FILE, other_format, read_json_object

SHARD_FILE = re.compile(r"^shard_(\d+)_of_(\d+)\.json$")


class ShardFileError(Exception):
    """A shard file that cannot be used at all (unreadable, not JSON, not a shard file)."""


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
    task_keys: list[tuple[str, int]]
    plan: list[TaskBlock]
    records: list[EpisodeRecord]
    # Who is writing its dir right now (a live process holds the dir's lock), or None.
    running: str | None = None
    # What made it (lerobot_hydra.rollout.provenance); None in shard files written before it was recorded.
    provenance: dict[str, Any] | None = None

    @property
    def dir(self) -> Path:
        return self.path.parent

    @property
    def name(self) -> str:
        return f"shard {self.shard_id} of {self.num_shards}"


def find_shard_files(sweep_dir: Path) -> list[Path]:
    """Every shard file under `sweep_dir`, outside hidden folders (.submitit, .hydra)."""
    found = []
    for path in sweep_dir.rglob("shard_*_of_*.json"):
        relative = path.relative_to(sweep_dir).parts
        if SHARD_FILE.match(path.name) and not any(part.startswith(".") for part in relative):
            found.append(path)
    return sorted(found)


def load_shard(path: Path) -> Shard:
    """The shard file at `path`, which is only ever replaced whole (never read half-written)."""
    match = SHARD_FILE.match(path.name)
    assert match is not None
    try:
        data = read_json_object(path)
    except OSError as err:
        raise ShardFileError(f"{path} cannot be read ({err}); re-run that shard") from err
    except ValueError as err:
        raise ShardFileError(
            f"{path} is not valid JSON ({err}); re-run that shard in place, which rebuilds it from the "
            f"{EPISODES_FILE} beside it and keeps every recorded episode: "
            f"{rerun_in_place(path.parent, int(match[1]), int(match[2]))}"
        ) from err
    wrong_format = other_format(data)
    if wrong_format is not None:
        raise ShardFileError(
            f"{path} {wrong_format}; merge it with the version that wrote it, or move it out of the sweep dir"
        )
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
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ShardFileError(f"{path} lacks or garbles a field ({err!r}); re-run that shard") from err
    if (shard.shard_id, shard.num_shards) != (int(match[1]), int(match[2])):
        raise ShardFileError(
            f"{path} holds shard {shard.shard_id} of {shard.num_shards}, not what its name says; re-run that shard"
        )
    return shard


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
        task = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None, []
    try:
        hydra_cfg = yaml.safe_load((run_dir / ".hydra" / "hydra.yaml").read_text())
        hydra_overrides = list(hydra_cfg["hydra"]["overrides"]["hydra"] or [])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        hydra_overrides = []
    return [str(o) for o in task or []], [str(o) for o in hydra_overrides]
