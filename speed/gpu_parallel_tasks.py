"""GPU busy time with eval.max_parallel_tasks 1 vs 4 on a GPU node (one command, a few minutes).

    MUJOCO_GL=egl python -m speed.gpu_parallel_tasks

Builds an ACT checkpoint with a ResNet-18 image encoder offline (random weights: the point is the GPU
work, not the success rate), evaluates it on 8 MetaWorld tasks with 224x224 pixel observations rendered by
EGL, once with one lane and once with four, sampling `nvidia-smi` utilization every 200 ms. Prints a table
of wall time, episodes/s and mean GPU busy %, and PASS when four lanes keep the GPU busier than one.
Needs the `lerobot` extra, an NVIDIA GPU and nvidia-smi.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devkit.lerobot_checkpoints import save_checkpoint
from speed.harness.timing import ENV, ROOT

TASKS = "[reach-v3,push-v3,drawer-open-v3,door-open-v3,button-press-v3,window-open-v3,pick-place-v3,basketball-v3]"
IMAGE = 224


def build_checkpoint(directory: Path) -> Path:
    features = {"observation.image": ("VISUAL", (3, IMAGE, IMAGE)), "observation.state": ("STATE", (4,))}
    config = {"pretrained_backbone_weights": None, "chunk_size": 10, "n_action_steps": 1, "use_vae": False}
    return save_checkpoint(directory, "act", features, (4, 0.0, 0.5), **config)


def run(checkpoint: Path, lanes: int) -> tuple[float, float, int]:
    """(wall s, mean GPU busy %, episodes) of one evaluation."""
    sampler = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "200"],
        stdout=subprocess.PIPE,
        text=True,
    )
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "eval.py"),
                f"hydra.run.dir={out}",
                "policy=act",
                f"policy.path={checkpoint}",
                f"env.task={TASKS}",
                "env.obs_type=pixels_agent_pos",
                f"env.observation_height={IMAGE}",
                f"env.observation_width={IMAGE}",
                "env.episode_length=100",
                "eval.n_episodes=8",
                "eval.batch_size=8",
                f"eval.max_parallel_tasks={lanes}",
                "eval.max_episodes_rendered=0",
                "device=cuda",
            ],
            cwd=ROOT,
            env={**ENV, "MUJOCO_GL": "egl"},
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - start
    sampler.terminate()
    samples = [float(line) for line in sampler.communicate()[0].split() if line.strip()]
    return wall, sum(samples) / max(1, len(samples)), 8 * 8


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = build_checkpoint(Path(tmp) / "act")
        results = {lanes: run(checkpoint, lanes) for lanes in (1, 4)}
    print(f"{'max_parallel_tasks':>18}  {'wall s':>7}  {'episodes/s':>10}  {'GPU busy %':>10}")
    for lanes, (wall, busy, episodes) in results.items():
        print(f"{lanes:>18}  {wall:7.1f}  {episodes / wall:10.2f}  {busy:10.1f}")
    ratio = results[4][1] / max(1e-6, results[1][1])
    ok = ratio > 1.0
    print(f"{'PASS' if ok else 'FAIL'}  GPU busy with 4 lanes vs 1: {ratio:.2f}x (target > 1.00x)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
