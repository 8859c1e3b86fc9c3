"""Episode videos: frames taken during the rollout, encoded to H.264 mp4 files in background threads.

Each video is assigned to one encoder thread, which receives its frames in order through a bounded queue,
so memory stays bounded and the rollout only waits if encoding falls a full queue behind. A video is
written under a temporary name and renamed when complete, so a video file is never half-written; a run
killed mid-episode leaves the temporary `.part` file, which `remove_partial_videos` deletes when the run
resumes, and `without_missing_videos` drops the paths of videos that never completed from the records.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_hydra.core.durable import remove_temporaries, replace_durably, temporary_path
from lerobot_hydra.core.layout import VIDEO_DIR
from lerobot_hydra.core.layout import video_path as layout_video_path
from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import TaskSpec

log = logging.getLogger("lerobot_hydra")

# Videos being written are hidden files `.episode_<k>.mp4.<random>.part` beside their final name.
PART_SUFFIX = ".part"
# Frames waiting per encoder thread (a 480x480 frame is 0.7 MB).
QUEUE_FRAMES = 64
ENCODER_THREADS = 2
# x264 settings: quick to encode, small files, playable in browsers (W&B) and every player.
CODEC_OPTIONS = {"preset": "veryfast", "crf": "23", "threads": "2"}

_FINISH = "finish"
_ABORT = "abort"


def video_path(task: TaskSpec, episode_index: int) -> str:
    """Path of an episode's video relative to the run dir."""
    return layout_video_path(task.task_group, task.task_id, episode_index)


def as_rgb_frame(frame: Any) -> np.ndarray:
    """An owned HxWx3 uint8 copy of a rendered frame, its sides padded to even sizes as yuv420p needs."""
    array = np.asarray(frame)
    if array.ndim == 2:
        array = array[..., None].repeat(3, axis=2)
    if array.ndim != 3 or array.shape[2] not in (3, 4):
        raise ValueError(f"expected an RGB frame of shape (height, width, 3), got {array.shape}")
    if array.dtype != np.uint8:
        array = np.clip(array * 255.0 if np.issubdtype(array.dtype, np.floating) else array, 0, 255)
    rgb = array[..., :3].astype(np.uint8)  # a copy: the env may reuse its buffer
    height, width = rgb.shape[:2]
    if height % 2 or width % 2:
        rgb = np.pad(rgb, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
    return rgb


class EpisodeVideo:
    """The frames of one episode on their way to the file at `rel_path` (relative to the run dir)."""

    def __init__(
        self, rel_path: str, frames: queue.Queue[tuple[EpisodeVideo | None, Any]], on_lost: Callable[[], None]
    ) -> None:
        self.rel_path = rel_path
        self._frames = frames
        self._on_lost = on_lost
        self._ended = False

    def add(self, frame: Any) -> None:
        if self._ended:
            return
        try:
            rgb = as_rgb_frame(frame)
        except ValueError as err:
            log.warning("video %s could not be written: %s", self.rel_path, err)
            self.abort()
            return
        self._frames.put((self, rgb))

    def finish(self) -> str | None:
        """Completes the file in the background; returns its path relative to the run dir (None if aborted)."""
        if self._ended:
            return None
        self._ended = True
        self._frames.put((self, _FINISH))
        return self.rel_path

    def abort(self) -> None:
        if not self._ended:
            self._ended = True
            self._frames.put((self, _ABORT))

    def lost(self) -> None:
        self.abort()
        self._on_lost()


class _Encoding:
    """An open mp4 file, created on the first frame, whose size fixes the video's size."""

    def __init__(self, path: Path, fps: int, frame: np.ndarray) -> None:
        import av

        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = temporary_path(path, PART_SUFFIX)
        try:
            self.container = av.open(str(self.tmp), mode="w", format="mp4", options={"movflags": "+faststart"})
        except Exception:
            self.tmp.unlink(missing_ok=True)
            raise
        try:
            self.stream = self.container.add_stream("libx264", rate=fps, options=CODEC_OPTIONS)
            self.stream.height, self.stream.width = frame.shape[:2]
            self.stream.pix_fmt = "yuv420p"
        except Exception:
            self.discard()
            raise

    def encode(self, frame: np.ndarray) -> None:
        import av

        if frame.shape[:2] != (self.stream.height, self.stream.width):
            raise ValueError(f"the frame size changed mid-episode to {frame.shape[:2]}")
        self.container.mux(self.stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))

    def finish(self) -> None:
        self.container.mux(self.stream.encode())
        self.container.close()
        replace_durably(self.tmp, self.path)

    def discard(self) -> None:
        try:
            self.container.close()
        except Exception:  # noqa: BLE001 - the file is deleted anyway
            pass
        self.tmp.unlink(missing_ok=True)


class VideoRecorder:
    """Videos of the first `max_per_task` episodes (by episode index) of every task, under `run_dir`.

    Thread-safe: lanes running in parallel share one recorder.
    """

    def __init__(self, run_dir: Path, fps: int, max_per_task: int, threads: int = ENCODER_THREADS) -> None:
        self.run_dir = run_dir
        self.fps = fps
        self.max_per_task = max_per_task
        self.written: list[str] = []
        self.failed: list[str] = []
        self._queues: list[queue.Queue[tuple[EpisodeVideo | None, Any]]] = [
            queue.Queue(maxsize=QUEUE_FRAMES) for _ in range(threads)
        ]
        self._lock = threading.Lock()
        self._lost_groups: set[str] = set()
        self._started = 0
        self._threads = [
            threading.Thread(target=self._encode_loop, args=(q,), name=f"video-encoder-{i}", daemon=True)
            for i, q in enumerate(self._queues)
        ]
        for thread in self._threads:
            thread.start()

    def wants(self, episode_index: int) -> bool:
        return episode_index < self.max_per_task

    def start(self, task: TaskSpec, episode_index: int) -> EpisodeVideo:
        with self._lock:
            frames = self._queues[self._started % len(self._queues)]
            self._started += 1
        return EpisodeVideo(video_path(task, episode_index), frames, lambda: self._lost(task))

    def _lost(self, task: TaskSpec) -> None:
        with self._lock:
            first = task.task_group not in self._lost_groups
            self._lost_groups.add(task.task_group)
        if first:
            log.warning("%s: the env's render() returned no frame, so its episodes get no video", task.label)

    def close(self) -> None:
        """Waits until every finished video is on disk; videos never finished or aborted are discarded."""
        for q in self._queues:
            q.put((None, None))
        for thread in self._threads:
            thread.join()
        if self.failed:
            log.warning("%d of %d videos could not be written", len(self.failed), len(self.failed) + len(self.written))

    def _encode_loop(self, frames: queue.Queue[tuple[EpisodeVideo | None, Any]]) -> None:
        encodings: dict[EpisodeVideo, _Encoding] = {}
        broken: set[EpisodeVideo] = set()
        while True:
            video, item = frames.get()
            if video is None:
                for encoding in encodings.values():
                    encoding.discard()
                return
            if isinstance(item, np.ndarray):
                if video in broken:
                    continue
                try:
                    if video not in encodings:
                        encodings[video] = _Encoding(self.run_dir / video.rel_path, self.fps, item)
                    encodings[video].encode(item)
                except Exception as err:  # noqa: BLE001 - a lost video is a warning, never a lost run
                    self._fail(video, err, encodings.pop(video, None))
                    broken.add(video)
                continue
            encoding = encodings.pop(video, None)
            if video in broken:
                broken.discard(video)
            elif item == _ABORT:
                if encoding is not None:
                    encoding.discard()
            else:
                try:
                    if encoding is None:
                        raise ValueError("the episode produced no frames")
                    encoding.finish()
                    self.written.append(video.rel_path)
                except Exception as err:  # noqa: BLE001 - a lost video is a warning, never a lost run
                    self._fail(video, err, encoding)

    def _fail(self, video: EpisodeVideo, err: Exception, encoding: _Encoding | None) -> None:
        log.warning("video %s could not be written: %s", video.rel_path, err)
        self.failed.append(video.rel_path)
        if encoding is not None:
            encoding.discard()


def remove_partial_videos(run_dir: Path) -> list[Path]:
    """Deletes the half-written videos a killed run left in `run_dir` (only while no process writes there)."""
    videos = run_dir / VIDEO_DIR
    if not videos.is_dir():
        return []
    return [path for folder in videos.iterdir() if folder.is_dir() for path in remove_temporaries(folder, PART_SUFFIX)]


def without_missing_videos(records: Iterable[EpisodeRecord], run_dir: Path) -> list[EpisodeRecord]:
    """Records whose video file does not exist (encoding failed, or the run was killed first) lose its path."""
    return [
        r if r.video_path is None or (run_dir / r.video_path).is_file() else dataclasses.replace(r, video_path=None)
        for r in records
    ]


def rebase_video_paths(records: Iterable[EpisodeRecord], run_dir: Path, out_dir: Path) -> list[EpisodeRecord]:
    """Records of the run in `run_dir` with their video paths made relative to `out_dir` (where a merge writes
    its eval_info.json), so that merged results point at the shards' videos."""
    return [
        r
        if r.video_path is None
        else dataclasses.replace(r, video_path=os.path.relpath(run_dir / r.video_path, out_dir))
        for r in records
    ]
