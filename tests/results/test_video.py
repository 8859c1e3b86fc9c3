"""Episode videos: one frame after reset and one per step, cut where the episode ended, encoded in the
background, the same whatever the batching; paths in records and eval_info; failures only warn."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.policies.random import RandomPolicy
from lerobot_hydra.processors.observation import LeRobotLayout, MapObservationKeys, ToNumpyAction
from lerobot_hydra.processors.pipeline import Pipeline
from lerobot_hydra.publish.video import (
    VideoRecorder,
    as_rgb_frame,
    rebase_video_paths,
    video_path,
    without_missing_videos,
)
from lerobot_hydra.rollout.lanes import LaneSettings, evaluate
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.runner import TaskWork
from tests.conftest import read_episodes, read_json, run_here

HEIGHT, WIDTH = 16, 24


@dataclass
class FrameEnvConfig(EnvConfig):
    """Two tasks; episode k lasts k + 2 steps; frame brightness is 10 + 20 * (step within the episode)."""

    log_dir: str = ""
    # The env renders nothing (render() returns None), like a gym env made without a render mode.
    blank: bool = False

    def tasks(self) -> list[TaskSpec]:
        return [TaskSpec("frames", i, f"frames-{i}", f"frame task {i}", 20) for i in range(2)]

    def spaces(self, task: TaskSpec) -> tuple[Any, Any]:
        from gymnasium import spaces

        return spaces.Dict({"agent_pos": spaces.Box(-1e6, 1e6, (2,), np.float64)}), spaces.Box(-1, 1, (1,), np.float32)

    def build(self, task: TaskSpec, render: bool) -> Any:
        return FrameEnv(Path(self.log_dir), self.blank)


class FrameEnv:
    def __init__(self, log_dir: Path, blank: bool) -> None:
        self.log_dir, self.blank = log_dir, blank
        self.t = self.length = 0

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.length, self.t = (options or {}).get("episode_index", 0) + 2, 0
        return {"agent_pos": np.zeros(2)}, {}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        self.t += 1
        done = self.t >= self.length
        return {"agent_pos": np.array([self.length, self.t], float)}, 1.0, done, False, {"is_success": done}

    def render(self) -> np.ndarray | None:
        with open(self.log_dir / f"renders_{os.getpid()}.txt", "a") as f:
            f.write("r\n")
        if self.blank:
            return None
        return np.full((HEIGHT, WIDTH, 3), 10 + 20 * self.t, np.uint8)

    def close(self) -> None:
        pass


def rollout(cfg: FrameEnvConfig, run_dir: Path, n_episodes: int, filmed: int, batch: int, use_async: bool, lanes: int):
    records: list[EpisodeRecord] = []
    _, action_space = cfg.spaces(cfg.tasks()[0])
    recorder = VideoRecorder(run_dir, fps=10, max_per_task=filmed)
    try:
        evaluate(
            LaneSettings(
                cfg,
                Pipeline([MapObservationKeys({}), LeRobotLayout()]),
                Pipeline([ToNumpyAction()]),
                0,
                batch,
                use_async,
                lanes,
                render=True,
            ),
            [TaskWork(t, list(range(n_episodes))) for t in cfg.tasks()],
            lambda: RandomPolicy(action_space),
            on_record=records.append,
            progress=Progress(60.0),
            videos=recorder,
        )
    finally:
        recorder.close()
    return sorted(records, key=lambda r: r.unit), recorder


def decode(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264" and stream.codec_context.pix_fmt == "yuv420p"
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def renders(log_dir: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in log_dir.glob("renders_*.txt"))


@pytest.mark.parametrize(("batch", "use_async", "lanes"), [(1, False, 1), (2, True, 1), (3, True, 2)])
def test_a_video_has_the_reset_frame_and_one_frame_per_step_whatever_the_batching(
    tmp_path: Path, batch: int, use_async: bool, lanes: int
) -> None:
    cfg = FrameEnvConfig(log_dir=str(tmp_path))
    records, recorder = rollout(cfg, tmp_path, n_episodes=4, filmed=3, batch=batch, use_async=use_async, lanes=lanes)
    assert len(records) == 8 and not recorder.failed
    for r in records:
        if r.episode_index >= 3:
            assert r.video_path is None
            continue
        assert r.video_path == f"videos/frames_{r.task_id}/episode_{r.episode_index}.mp4"
        frames = decode(tmp_path / r.video_path)
        assert len(frames) == r.steps + 1 == r.episode_index + 3
        assert all(f.shape == (HEIGHT, WIDTH, 3) for f in frames)
        # First frame right after reset (step 0), then one per step, in order.
        brightness = [float(f.mean()) for f in frames]
        assert np.allclose(brightness, [10 + 20 * t for t in range(len(frames))], atol=3)
    # Only the filmed episodes rendered: no frames of unfilmed episodes or idle slots were made and thrown away.
    assert renders(tmp_path) == 2 * sum(k + 3 for k in range(3))
    assert not list(tmp_path.rglob("*.part"))


def test_an_env_without_frames_loses_its_videos_not_its_results(tmp_path: Path, caplog: Any) -> None:
    cfg = FrameEnvConfig(log_dir=str(tmp_path), blank=True)
    with caplog.at_level(logging.WARNING, logger="lerobot_hydra"):
        records, _ = rollout(cfg, tmp_path, n_episodes=2, filmed=2, batch=2, use_async=False, lanes=1)
    assert [r.steps for r in records] == [2, 3, 2, 3] and all(r.success for r in records)
    assert all(r.video_path is None for r in records)
    assert not (tmp_path / "videos").exists() or not list((tmp_path / "videos").rglob("*"))
    assert "returned no frame" in caplog.text
    # The first (blank) frame ends the attempt: one render per filmed episode, not one per step.
    assert renders(tmp_path) == 4


def test_every_run_of_a_process_warns_once_of_an_env_without_frames(tmp_path: Path, caplog: Any) -> None:
    # A sweep on Hydra's basic launcher runs its jobs in one process: each job's log must say it.
    for run in ("a", "b"):
        caplog.clear()
        (tmp_path / run).mkdir()
        cfg = FrameEnvConfig(log_dir=str(tmp_path / run), blank=True)
        with caplog.at_level(logging.WARNING, logger="lerobot_hydra"):
            rollout(cfg, tmp_path / run, n_episodes=2, filmed=2, batch=2, use_async=False, lanes=1)
        assert caplog.text.count("returned no frame") == 1, run


def test_a_video_that_fails_to_encode_is_a_warning_and_loses_only_its_path(tmp_path: Path, caplog: Any) -> None:
    task = TaskSpec("g", 0, "t", "t", 10)
    recorder = VideoRecorder(tmp_path, fps=10, max_per_task=5)
    good, bad, aborted, garbled = (recorder.start(task, k) for k in range(4))
    with caplog.at_level(logging.WARNING, logger="lerobot_hydra"):
        for t in range(4):
            good.add(np.full((8, 8, 3), 40 * t, np.uint8))
            bad.add(np.zeros((8, 8, 3) if t < 2 else (10, 8, 3), np.uint8))  # the size changes mid-episode
            aborted.add(np.zeros((8, 8, 3), np.uint8))
            garbled.add(np.zeros((8, 8, 3) if t < 2 else (8, 8, 2), np.uint8))  # not an image: dropped at once
        paths = [good.finish(), bad.finish()]
        assert garbled.finish() is None
        aborted.abort()  # e.g. the rollout raised before the episode ended
        recorder.close()
    assert recorder.written == [paths[0]] and recorder.failed == [paths[1]]
    assert "episode_1.mp4 could not be written" in caplog.text and "episode_3.mp4 could not be written" in caplog.text
    assert not (tmp_path / video_path(task, 3)).exists()
    assert len(decode(tmp_path / paths[0])) == 4
    assert not (tmp_path / paths[1]).exists() and not (tmp_path / video_path(task, 2)).exists()
    assert not list(tmp_path.rglob("*.part"))
    records = [
        EpisodeRecord("g", 0, "t", "t", k, k, True, 1.0, 1.0, 3, 0.1, video_path=video_path(task, k)) for k in range(3)
    ]
    assert [r.video_path for r in without_missing_videos(records, tmp_path)] == [paths[0], None, None]
    rebased = rebase_video_paths(records[:1], tmp_path, tmp_path.parent)
    assert (tmp_path.parent / rebased[0].video_path).resolve() == (tmp_path / paths[0]).resolve()


def test_frames_are_copied_as_rgb_uint8_with_even_sides() -> None:
    frame = np.full((5, 7, 4), 0.5, np.float32)  # odd sides, RGBA, floats in [0, 1]
    rgb = as_rgb_frame(frame)
    assert rgb.shape == (6, 8, 3) and rgb.dtype == np.uint8 and (rgb == 127).all()
    buffer = np.zeros((4, 4, 3), np.uint8)
    copy = as_rgb_frame(buffer)
    buffer[:] = 255  # an env reusing its render buffer does not change frames already taken
    assert (copy == 0).all()


def test_eval_films_the_first_episodes_of_each_metaworld_task(tmp_path: Path) -> None:
    # MetaWorld frames cost ~100 ms each on OSMesa whatever their size: few, short episodes.
    run_here(
        "env.task=[reach-v3,drawer-close-v3]",
        "policy=random",
        "env.obs_type=state",
        "env.observation_height=32",
        "env.observation_width=32",
        "env.episode_length=6",
        "eval.n_episodes=3",
        "eval.batch_size=2",
        "eval.max_episodes_rendered=2",
        out_dir=tmp_path,
    )
    info = read_json(tmp_path / "eval_info.json")
    episodes = read_episodes(tmp_path)
    assert len(episodes) == 6
    filmed = [e for e in episodes if e["episode_index"] < 2]
    assert all(e["video_path"] is None for e in episodes if e["episode_index"] >= 2)
    assert sorted(e["video_path"] for e in filmed) == sorted(info["overall"]["video_paths"])
    for task in info["per_task"]:
        expected = [f"videos/{task['task_group']}_{task['task_id']}/episode_{k}.mp4" for k in range(2)]
        assert task["metrics"]["video_paths"] == expected
    for e in filmed:
        frames = decode(tmp_path / e["video_path"])
        assert len(frames) == e["steps"] + 1 == 7
        assert frames[0].shape == (32, 32, 3)
        assert np.std(frames[0]) > 5  # a rendered scene, not a blank frame
        assert np.abs(frames[0].astype(int) - frames[-1]).mean() > 0.05  # the arm moved
    assert not list(tmp_path.rglob("*.part"))
