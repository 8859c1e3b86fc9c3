"""Rollout recording (`eval.recording`): every step of every recorded episode written as a LeRobotDataset (v3) with
LeRobot's own writer, in `<run dir>/recording/part-NNN` (a resumed run writes a new part; the merge of a sweep
joins every part of every shard with LeRobot's `aggregate_datasets`). Each frame carries the episode's seed, task
(its position in the run's task list, and its id) and episode index (`eval.*` features) and its task text, so a
recorded failure can be re-run exactly.

LeRobot's dataset code is imported only when recording is on: it is slow to import."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import EpisodeKey, EpisodeRecord, TaskKey
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.publish.recording_parts import (
    dataset_class,
    drop_unfinished,
    mark_finished,
    next_part,
    stepped_units,
)
from lerobot_hydra.rollout.recording import Step
from lerobot_hydra.schemas.schema import EvalConfig

log = logging.getLogger("lerobot_hydra")

# A part is finalized (and its episodes safe from a kill) every this many episodes, and at the end of each block a
# dynamic shard claimed (`DatasetRecorder.cut`).
PART_EPISODES = 10
_EVAL_FEATURES = ("eval.seed", "eval.task_index", "eval.task_id", "eval.episode_index")
_STEP_FEATURES = {"next.reward": "float32", "next.done": "bool", "next.success": "bool"}


@contextmanager
def recording(
    eval_cfg: EvalConfig, env: EnvConfig, tasks: list[TaskSpec], out_dir: Path
) -> Iterator[DatasetRecorder | None]:
    """The run's recorder while the block runs (None when `eval.recording` is unset), finalized at its end; `tasks`:
    the run's tasks, whose position is each frame's `eval.task_index`."""
    if eval_cfg.recording is None:
        yield None
        return
    recorder = DatasetRecorder(out_dir, eval_cfg.recording, eval_cfg.recording_images, env.fps, dict(env.features_map))
    recorder.task_index = {t.key: i for i, t in enumerate(tasks)}
    try:
        yield recorder
    finally:
        recorder.close()


class DatasetRecorder:
    """Holds each ended episode's steps until its record is accepted (`write`), then hands them to a writer thread
    that saves them as one episode: the lanes go on stepping meanwhile. The episodes go into parts of at most
    `PART_EPISODES` episodes, each finalized on its own (publish/recording_parts.py), so a killed process loses only
    the steps of its unfinished part; the parts a killed session left unfinished are deleted here, and `missing`
    says which recorded episodes must run again for their steps."""

    def __init__(self, out_dir: Path, keys: str, images: str, fps: int, features_map: dict[str, str]) -> None:
        self._cls: Any = None  # LeRobotDataset, imported by `prepare`
        self._ready = threading.Event()
        self._out_dir = out_dir
        dropped = drop_unfinished(out_dir)
        if dropped:
            log.info("deleted %d recording part(s) a killed session left unfinished", len(dropped))
        self.stepped: set[EpisodeKey] = stepped_units(out_dir)  # in a finished part, or queued to the writer
        self._root = next_part(out_dir)
        self._keys = None if keys.strip() == "all" else [k.strip() for k in keys.split(",") if k.strip()]
        self._images, self._fps, self._names = images, fps, features_map
        self._held: dict[EpisodeKey, list[Step]] = {}
        self._lock = threading.Lock()
        self._recorded: list[str] | None = None
        self._queue: queue.Queue[tuple[list[Step], EpisodeRecord] | threading.Event | None] = queue.Queue(maxsize=8)
        self._error: BaseException | None = None
        self.episodes = 0
        self.task_index: dict[TaskKey, int] = {}  # (task group, task id) -> its position in the run
        self._thread = threading.Thread(target=self._write_all, name="lerobot_hydra-recording", daemon=True)
        self._thread.start()

    def prepare(self) -> None:
        """Imports LeRobot's dataset code (seconds), in the run's thread, not in the writer's: two threads importing
        torch's module graph at once can see a partially initialized module. The lanes call it once their envs are
        started, so that it overlaps the simulators being built in the workers."""
        if self._cls is None:
            try:
                self._cls = dataset_class()
            finally:
                self._ready.set()

    def missing(self, recorded: set[EpisodeKey]) -> set[EpisodeKey]:
        """The episodes of `recorded` (their records exist) whose steps no finished part of this run holds."""
        return recorded - self.stepped

    def hold(self, unit: EpisodeKey, steps: list[Step]) -> None:
        with self._lock:
            self._held[unit] = steps

    def write(self, record: EpisodeRecord) -> None:
        """Queues the held steps of `record`'s episode (called once the run store accepted the record, or when an
        episode recorded earlier ran again for its steps); an episode whose steps are recorded is not again."""
        with self._lock:
            steps = self._held.pop(record.unit, None)
            if not steps or record.unit in self.stepped:
                return
            self.stepped.add(record.unit)
            if self._recorded is None:
                self._recorded = self._observation_keys(steps[0]["observation"])
        if self._error is not None:
            raise self._failed()
        self._queue.put((steps, record))

    def cut(self) -> None:
        """Finalizes the part being written (every episode written so far is then safe from a kill) and returns
        once it is; the next episode starts a new part."""
        done = threading.Event()
        self._queue.put(done)
        done.wait()
        if self._error is not None:
            raise self._failed()

    def close(self) -> None:
        """Writes what is queued and finalizes the last part (its parquet footers and metadata); episodes never
        accepted are dropped. A failed write raises here, in one line."""
        with self._lock:
            self._held.clear()
        self._ready.set()
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._failed()
        if self.episodes:
            log.info("recorded %d episodes as a LeRobot dataset in %s", self.episodes, self._root.parent)

    def _failed(self) -> UserError:
        if isinstance(self._error, UserError):
            return self._error
        return UserError(f"recording the rollouts into {self._root} failed ({self._error!r}); the records are kept")

    def _write_all(self) -> None:
        part: _Part | None = None
        try:
            for item in iter(self._queue.get, None):
                if isinstance(item, threading.Event):
                    self._finish(part)
                    part = None
                    item.set()
                    continue
                steps, record = item
                if part is None:
                    self._ready.wait()
                    part = _Part(self._create(self._cls, steps[0]), self._root)
                for step in steps:
                    part.dataset.add_frame(self._frame(step, record))
                part.dataset.save_episode()
                part.units.append(record.unit)
                self.episodes += 1
                if len(part.units) >= PART_EPISODES:
                    self._finish(part)
                    part = None
        except BaseException as err:  # surfaces in the run's thread (`write`, `cut`, `close`)
            self._error = err
            while (item := self._queue.get()) is not None:  # unblock the lanes until the run closes the recorder
                if isinstance(item, threading.Event):
                    item.set()
        finally:
            try:
                self._finish(part)
            except BaseException as err:
                self._error = self._error or err

    def _finish(self, part: _Part | None) -> None:
        """Finalizes `part` and declares it finished; the next episode goes into a new part."""
        if part is not None:
            part.dataset.finalize()
            mark_finished(part.root, part.units)
            self._root = next_part(self._out_dir)

    def _observation_keys(self, observation: dict[str, np.ndarray]) -> list[str]:
        if self._keys is None:
            return sorted(observation)
        unknown = [k for k in self._keys if k not in observation]
        if unknown:
            raise UserError(
                f"eval.recording names observation key(s) {', '.join(unknown)} the env does not return; "
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


class _Part:
    """The LeRobot dataset being written and the episodes it holds so far."""

    def __init__(self, dataset: Any, root: Path) -> None:
        self.dataset, self.root, self.units = dataset, root, list[EpisodeKey]()


def _vector(value: Any, dtype: type) -> np.ndarray:
    array = np.asarray(value, dtype=dtype)
    return array.reshape(1) if array.ndim == 0 else array
