"""A run dir's recording parts (publish/recording.py writes them): `<run dir>/recording/part-NNN`, each a LeRobot
dataset finalized on its own, and beside it `part-NNN.units.json`, written after its `finalize`, listing the
episodes (task group, task id, episode index) it holds. A part without that file was left unfinished by a killed
process: it is skipped by the merge and deleted when the run resumes, and its episodes, whose records exist, are
run again for their steps (`stepped_units` says which episodes have them). The merge joins every finished part of
every shard with LeRobot's `aggregate_datasets`."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from lerobot_hydra.core.durable import write_json_atomic
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import EpisodeKey

log = logging.getLogger("lerobot_hydra")

RECORDING_DIR = "recording"
UNITS_SUFFIX = ".units.json"


def dataset_class() -> Any:
    """LeRobot's `LeRobotDataset`, or a one-line UserError when this LeRobot cannot write datasets."""
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError as err:
        raise UserError(
            f"eval.recording needs LeRobot's dataset writer ({err}); install lerobot>=0.4 or unset it"
        ) from None
    if not all(hasattr(LeRobotDataset, name) for name in ("create", "add_frame", "save_episode", "finalize")):
        raise UserError("eval.recording needs LeRobot's v3 dataset writer (lerobot>=0.4); upgrade LeRobot or unset it")
    return LeRobotDataset


def units_file(part: Path) -> Path:
    return part.with_name(part.name + UNITS_SUFFIX)


def mark_finished(part: Path, units: list[EpisodeKey]) -> None:
    """Declares `part` finalized, holding `units` (durably: the merge and a resume trust it)."""
    write_json_atomic(units_file(part), {"units": [list(u) for u in sorted(units)]})


def _parts(run_dir: Path) -> list[Path]:
    return sorted(p for p in (run_dir / RECORDING_DIR).glob("part-*") if p.is_dir())


def finished_parts(run_dir: Path) -> list[Path]:
    return [p for p in _parts(run_dir) if units_file(p).is_file()]


def part_units(part: Path) -> list[EpisodeKey]:
    data = json.loads(units_file(part).read_text())
    return [(str(g), int(t), int(k)) for g, t, k in data["units"]]


def stepped_units(run_dir: Path) -> set[EpisodeKey]:
    """The episodes whose steps a finished part of `run_dir` holds."""
    return {u for part in finished_parts(run_dir) for u in part_units(part)}


def drop_unfinished(run_dir: Path) -> list[Path]:
    """Deletes the parts a killed session of `run_dir` left unfinished (call with the run dir locked)."""
    dropped = [p for p in _parts(run_dir) if not units_file(p).is_file()]
    for part in dropped:
        shutil.rmtree(part, ignore_errors=True)
    return dropped


def next_part(out_dir: Path) -> Path:
    """A new part dir under `<out_dir>/recording` (the finished parts of earlier sessions are kept)."""
    parent = out_dir / RECORDING_DIR
    k = 0
    while (parent / f"part-{k:03d}").exists() or units_file(parent / f"part-{k:03d}").exists():
        k += 1
    return parent / f"part-{k:03d}"


def recorded_parts(run_dirs: list[Path]) -> list[Path]:
    """The finished recording parts of `run_dirs`, in order (a part a killed session left unfinished is skipped)."""
    parts = []
    for run_dir in run_dirs:
        for part in _parts(run_dir):
            if units_file(part).is_file():
                parts.append(part)
            else:
                log.warning("skipping %s: a recording part its session did not finish", part)
    return parts


def check_parts(parts: list[Path], recorded: set[EpisodeKey]) -> None:
    """Says (a warning) which recorded episodes have no steps in `parts`, and which are in two of them."""
    seen: dict[EpisodeKey, Path] = {}
    for part in parts:
        for unit in part_units(part):
            if unit in seen:
                log.warning("episode %s/%d #%d is recorded in both %s and %s", *unit, seen[unit], part)
            seen[unit] = part
    missing = sorted(recorded - set(seen))
    if missing:
        log.warning(
            "%d recorded episode(s) have no recorded steps (e.g. %s/%d #%d: its part was left unfinished by a "
            "killed job); rerun that shard to record them",
            len(missing),
            *missing[0],
        )


def merge_recordings(run_dirs: list[Path], out_dir: Path, recorded: set[EpisodeKey] | None = None) -> Path | None:
    """Every recorded episode of `run_dirs` joined into one dataset, `<out_dir>/recording`, with LeRobot's
    `aggregate_datasets` (rebuilt by each merge); None when nothing was recorded. `recorded`: the merged records'
    episodes, each expected in one part."""
    parts = recorded_parts(run_dirs)
    if not parts:
        return None
    if recorded is not None:
        check_parts(parts, recorded)
    dataset_class()  # one line when this LeRobot cannot
    from lerobot.datasets.aggregate import aggregate_datasets

    target = out_dir / RECORDING_DIR
    # Hugging Face `datasets` reads parquet files through glob patterns, and sweep job dirs are named after their
    # overrides (`env.task=[a,b]`): the parts are linked into, and joined in, a staging dir free of such characters.
    with tempfile.TemporaryDirectory(prefix="lerobot_hydra-recording-") as staging:
        links = []
        for k, part in enumerate(parts):
            links.append(Path(staging) / f"part-{k:03d}")
            links[-1].symlink_to(part.resolve(), target_is_directory=True)
        joined = Path(staging) / "merged"
        ids = [f"local/part-{k:03d}" for k in range(len(parts))]
        aggregate_datasets(ids, f"local/{out_dir.name}", roots=links, aggr_root=joined)
        building = out_dir / f"{RECORDING_DIR}.merging"
        shutil.rmtree(building, ignore_errors=True)
        shutil.copytree(joined, building)
    shutil.rmtree(target, ignore_errors=True)
    building.rename(target)
    return target
