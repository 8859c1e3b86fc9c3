"""Rollout recording (`eval.record`): every step of every recorded episode written as a LeRobotDataset (v3) with
LeRobot's own writer, in `<run dir>/recording/part-NNN` (a resumed run writes a new part; the merge of a sweep
joins every part of every shard with LeRobot's `aggregate_datasets`). Each frame carries the episode's seed, task
(its position in the run's task list, and its id) and episode index (`eval.*` features) and its task text, so a
recorded failure can be re-run exactly.

LeRobot's dataset code is imported only when recording is on: it is slow to import."""

from __future__ import annotations

import logging
import queue
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_hydra.config.schema import EvalConfig
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.rollout.recording import Step, using_recorder

log = logging.getLogger("lerobot_hydra")

RECORDING_DIR = "recording"
_EVAL_FEATURES = ("eval.seed", "eval.task_index", "eval.task_id", "eval.episode_index")
_STEP_FEATURES = {"next.reward": "float32", "next.done": "bool", "next.success": "bool"}


def dataset_class() -> Any:
    """LeRobot's `LeRobotDataset`, or a one-line UserError when this LeRobot cannot write datasets."""
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError as err:
        raise UserError(
            f"eval.record needs LeRobot's dataset writer ({err}); install lerobot>=0.4 or unset it"
        ) from None
    if not all(hasattr(LeRobotDataset, name) for name in ("create", "add_frame", "save_episode", "finalize")):
        raise UserError("eval.record needs LeRobot's v3 dataset writer (lerobot>=0.4); upgrade LeRobot or unset it")
    return LeRobotDataset


def next_part(out_dir: Path) -> Path:
    """A new part dir under `<out_dir>/recording` (parts of earlier sessions of a resumed run are kept)."""
    parent = out_dir / RECORDING_DIR
    k = 0
    while (parent / f"part-{k:03d}").exists():
        k += 1
    return parent / f"part-{k:03d}"


@contextmanager
def recording(
    eval_cfg: EvalConfig, env: EnvConfig, tasks: list[TaskSpec], out_dir: Path
) -> Iterator[DatasetRecorder | None]:
    """The run's recorder while the block runs (None when `eval.record` is unset), finalized at its end; `tasks`:
    the run's tasks, whose position is each frame's `eval.task_index`."""
    if eval_cfg.record is None:
        yield None
        return
    recorder = DatasetRecorder(out_dir, eval_cfg.record, eval_cfg.record_images, env.fps, dict(env.features_map))
    recorder.task_index = {t.key: i for i, t in enumerate(tasks)}
    try:
        with using_recorder(recorder):
            yield recorder
    finally:
        recorder.close()


class DatasetRecorder:
    """Holds each ended episode's steps until its record is accepted (`write`), then hands them to a writer thread
    that saves them as one episode: the lanes go on stepping meanwhile."""

    def __init__(self, out_dir: Path, keys: str, images: str, fps: int, features_map: dict[str, str]) -> None:
        # Imported here, in the run's thread, not in the writer's: two threads importing torch's module graph at
        # once can see a partially initialized module.
        self._cls = dataset_class()
        self._root = next_part(out_dir)
        self._keys = None if keys.strip() == "all" else [k.strip() for k in keys.split(",") if k.strip()]
        self._images, self._fps, self._names = images, fps, features_map
        self._held: dict[tuple[str, int, int], list[Step]] = {}
        self._lock = threading.Lock()
        self._recorded: list[str] | None = None
        self._queue: queue.Queue[tuple[list[Step], EpisodeRecord] | None] = queue.Queue(maxsize=8)
        self._error: BaseException | None = None
        self.episodes = 0
        self.task_index: dict[tuple[str, int], int] = {}  # (task group, task id) -> its position in the run
        self._thread = threading.Thread(target=self._write_all, name="lerobot_hydra-recording", daemon=True)
        self._thread.start()

    def hold(self, unit: tuple[str, int, int], steps: list[Step]) -> None:
        with self._lock:
            self._held[unit] = steps

    def write(self, record: EpisodeRecord) -> None:
        """Queues the held steps of `record`'s episode (called once the run store accepted the record)."""
        with self._lock:
            steps = self._held.pop(record.unit, None)
            if not steps:
                return
            if self._recorded is None:
                self._recorded = self._observation_keys(steps[0]["observation"])
        if self._error is not None:
            raise self._failed()
        self._queue.put((steps, record))

    def close(self) -> None:
        """Writes what is queued and finalizes the dataset (its parquet footers and metadata); episodes never
        accepted are dropped. A failed write raises here, in one line."""
        with self._lock:
            self._held.clear()
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._failed()
        if self.episodes:
            log.info("recorded %d episodes as a LeRobot dataset in %s", self.episodes, self._root)

    def _failed(self) -> UserError:
        if isinstance(self._error, UserError):
            return self._error
        return UserError(f"recording the rollouts into {self._root} failed ({self._error!r}); the records are kept")

    def _write_all(self) -> None:
        dataset: Any = None
        try:
            for steps, record in iter(self._queue.get, None):
                if dataset is None:
                    dataset = self._create(self._cls, steps[0])
                for step in steps:
                    dataset.add_frame(self._frame(step, record))
                dataset.save_episode()
                self.episodes += 1
        except BaseException as err:  # surfaces in the run's thread (`write`, `close`)
            self._error = err
            while self._queue.get() is not None:  # unblock the lanes until the run closes the recorder
                pass
        finally:
            if dataset is not None:
                dataset.finalize()

    def _observation_keys(self, observation: dict[str, np.ndarray]) -> list[str]:
        if self._keys is None:
            return sorted(observation)
        unknown = [k for k in self._keys if k not in observation]
        if unknown:
            raise UserError(
                f"eval.record names observation key(s) {', '.join(unknown)} the env does not return; "
                f"choose among {', '.join(sorted(observation))} (or 'all')"
            )
        return self._keys

    def _name(self, key: str) -> str:
        return self._names.get(key) or "observation." + key.replace("/", ".")

    def _create(self, cls: Any, first: Step) -> Any:
        features: dict[str, dict[str, Any]] = {}
        observation = first["observation"]
        assert self._recorded is not None
        for key in self._recorded:
            features[self._name(key)] = self._feature(observation[key])
        action = np.asarray(first["action"])
        features["action"] = {"dtype": "float32", "shape": action.shape or (1,), "names": None}
        for name, dtype in _STEP_FEATURES.items():
            features[name] = {"dtype": dtype, "shape": (1,), "names": None}
        for name in _EVAL_FEATURES:
            features[name] = {"dtype": "int64", "shape": (1,), "names": None}
        self._root.parent.mkdir(parents=True, exist_ok=True)
        return cls.create(
            repo_id=f"local/{self._root.parent.parent.name}",
            fps=self._fps,
            features=features,
            root=self._root,
            use_videos=self._images == "video",
        )

    def _feature(self, value: np.ndarray) -> dict[str, Any]:
        if value.dtype == np.uint8 and value.ndim == 3 and value.shape[-1] in (1, 3, 4):
            dtype = "video" if self._images == "video" else "image"
            return {"dtype": dtype, "shape": value.shape, "names": ["height", "width", "channels"]}
        return {"dtype": "float32", "shape": value.shape or (1,), "names": None}

    def _frame(self, step: Step, record: EpisodeRecord) -> dict[str, Any]:
        frame: dict[str, Any] = {"task": record.task or record.task_name}
        for key in self._recorded or []:
            value = step["observation"][key]
            frame[self._name(key)] = value if value.dtype == np.uint8 else _vector(value, np.float32)
        frame["action"] = _vector(step["action"], np.float32)
        for name, dtype in _STEP_FEATURES.items():
            frame[name] = np.array([step[name.removeprefix("next.")]], dtype=np.dtype(dtype))
        position = self.task_index.get((record.task_group, record.task_id), -1)
        ids = (record.seed, position, record.task_id, record.episode_index)
        for name, value in zip(_EVAL_FEATURES, ids, strict=True):
            frame[name] = np.array([value], dtype=np.int64)
        return frame


def _vector(value: Any, dtype: type) -> np.ndarray:
    array = np.asarray(value, dtype=dtype)
    return array.reshape(1) if array.ndim == 0 else array


def recorded_parts(run_dirs: list[Path]) -> list[Path]:
    """The finalized recording parts of `run_dirs`, in order (a part a killed session left unfinished is skipped)."""
    parts = []
    for run_dir in run_dirs:
        for part in sorted((run_dir / RECORDING_DIR).glob("part-*")):
            if (part / "meta" / "info.json").is_file() and any((part / "meta" / "episodes").rglob("*.parquet")):
                parts.append(part)
            else:
                log.warning("skipping %s: a recording its session did not finish", part)
    return parts


def merge_recordings(run_dirs: list[Path], out_dir: Path) -> Path | None:
    """Every recorded episode of `run_dirs` joined into one dataset, `<out_dir>/recording`, with LeRobot's
    `aggregate_datasets` (rebuilt by each merge); None when nothing was recorded."""
    parts = recorded_parts(run_dirs)
    if not parts:
        return None
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
