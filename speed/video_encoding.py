"""Does writing videos stall the rollout, and what does encoding cost next to rendering?

    python -m speed.video_encoding

MetaWorld reach-v3, 480x480 frames rendered by OSMesa, batch 2 async, every episode filmed. The rollout
hands each frame to the recorder (`EpisodeVideo.add`: a copy and a put on a bounded queue) and background
threads encode H.264. Target: the rollout spends >= 0.98 of its time outside `add`, i.e. under 2% waiting on
video. Wall times on a shared machine are noisy, so the stall is measured as a fraction of the same run.
Also printed: CPU seconds per frame of rendering and of encoding (process CPU time, robust to load).

Second target: with a policy that leaves the CPU free while it computes (as one on a GPU does; modelled by a
40 ms sleep per call, a small VLA's latency), workers render each video frame right after the step, during
inference, so filming every episode costs little wall time: unfilmed / filmed wall time >= 0.9.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from speed.harness.timing import verdict

os.environ.setdefault("MUJOCO_GL", "osmesa")

from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig
from lerobot_hydra.policies.random import RandomPolicy
from lerobot_hydra.publish.video import EpisodeVideo, VideoRecorder
from lerobot_hydra.rollout.lanes import LaneSettings, evaluate
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.runner import TaskWork

EPISODES, LENGTH = 4, 40
ACCELERATOR_INFERENCE_S = 0.04


class OffloadedPolicy(RandomPolicy):
    """Random actions after a sleep: inference that keeps this process waiting but the CPU free."""

    def select_action(self, batch: dict[str, Any]) -> Any:
        time.sleep(ACCELERATOR_INFERENCE_S)
        return super().select_action(batch)


def timed_rollout(policy_type: type[RandomPolicy], length: int, filmed: bool) -> tuple[float, int]:
    """(rollout wall s, mp4 files written) of MetaWorld reach-v3, EPISODES episodes, batch 2 async."""
    cfg = MetaWorldEnvConfig(task="reach-v3", obs_type="state", episode_length=length)
    pre, post = cfg.build_processors()
    _, action_space = cfg.spaces(cfg.tasks()[0])
    with tempfile.TemporaryDirectory() as out:
        recorder = VideoRecorder(Path(out), cfg.fps, max_per_task=EPISODES) if filmed else None
        start = time.perf_counter()
        evaluate(
            LaneSettings(cfg, pre, post, 0, 2, True, 1, render=filmed),
            [TaskWork(t, list(range(EPISODES))) for t in cfg.tasks()],
            lambda: policy_type(action_space),
            on_record=lambda record: None,
            progress=Progress(600.0, tty=False),
            videos=recorder,
        )
        wall = time.perf_counter() - start
        if recorder is not None:
            recorder.close()
        return wall, len(list(Path(out).rglob("*.mp4")))


def filming_cost(filmed: bool, length: int = 60) -> float:
    """Rollout wall seconds of the offloaded policy, every episode filmed or none."""
    return timed_rollout(OffloadedPolicy, length, filmed)[0]


def rollout() -> tuple[float, float, int]:
    """(rollout wall s, seconds inside EpisodeVideo.add, mp4 files written)."""
    in_add = [0.0]
    original_add = EpisodeVideo.add

    def timed_add(self: EpisodeVideo, frame: object) -> None:
        start = time.perf_counter()
        original_add(self, frame)
        in_add[0] += time.perf_counter() - start

    EpisodeVideo.add = timed_add  # type: ignore[method-assign]
    try:
        wall, written = timed_rollout(RandomPolicy, LENGTH, filmed=True)
        return wall, in_add[0], written
    finally:
        EpisodeVideo.add = original_add  # type: ignore[method-assign]


def render_cpu_s() -> float:
    """CPU seconds per 480x480 MetaWorld frame (OSMesa, all its threads)."""
    cfg = MetaWorldEnvConfig(task="reach-v3", obs_type="state")
    env = cfg.build(cfg.tasks()[0], render=True)
    env.reset(seed=0)
    env.render()
    start = time.process_time()
    for _ in range(10):
        env.render()
    env.close()
    return (time.process_time() - start) / 10


def encode_cpu_s() -> float:
    """CPU seconds per 480x480 frame through the recorder (a moving gradient, not trivially compressible)."""
    import numpy as np

    from lerobot_hydra.envs.base import TaskSpec

    ramp = np.linspace(0, 255, 480, dtype=np.float32)
    frames = [
        np.repeat(((ramp[None, :, None] + ramp[:, None, None] * 0.5 + 3 * t) % 256).astype(np.uint8), 3, axis=2)
        for t in range(200)
    ]
    with tempfile.TemporaryDirectory() as out:
        start = time.process_time()
        recorder = VideoRecorder(Path(out), fps=80, max_per_task=1, threads=1)
        video = recorder.start(TaskSpec("g", 0, "t", "t", 1), 0)
        for frame in frames:
            video.add(frame)
        video.finish()
        recorder.close()
        return (time.process_time() - start) / len(frames)


def main() -> int:
    wall, in_add, written = rollout()
    frames = EPISODES * (LENGTH + 1)
    ok = verdict(
        "share of the rollout not spent handing frames to the encoder",
        (wall - in_add) / wall,
        0.98,
        f"{in_add * 1000 / frames:.2f} ms per frame in add() over {frames} frames, rollout {wall:.1f} s; "
        f"{written} mp4 written",
    )
    unfilmed, filmed = filming_cost(False), filming_cost(True)
    overlapped = verdict(
        "unfilmed / filmed wall time, policy inference off the CPU",
        unfilmed / filmed,
        0.9,
        f"{ACCELERATOR_INFERENCE_S * 1000:.0f} ms sleep per policy call, {EPISODES} x 60 steps, batch 2: "
        f"no video {unfilmed:.1f} s, every episode filmed {filmed:.1f} s",
    )
    render, encode = render_cpu_s(), encode_cpu_s()
    print(
        f"info  CPU per 480x480 frame: rendering {render * 1000:.0f} ms, encoding {encode * 1000:.1f} ms "
        f"({100 * encode / render:.1f}% of rendering)",
        flush=True,
    )
    return 0 if ok and overlapped and written == EPISODES else 1


if __name__ == "__main__":
    sys.exit(main())
