"""Versus lerobot-eval: one LeRobot checkpoint, one workload, through LeRobot's own CLI and through eval.py.

Workload: a tiny ACT (ResNet-18 backbone, random but seeded weights, built locally with LeRobot's classes and
saved with its processors) on PushT (pixels_agent_pos), 4 episodes of up to 300 steps, batch 2, seeds 1000-1003,
every episode filmed, on the CPU (or --device). Both sides use their own defaults otherwise (lerobot-eval: sync
envs; eval.py: async workers). Wall time is process start to exit, so startup and video encoding count.

The two runs must agree episode by episode (same seeds, same initial states, deterministic policy): the script
checks the per-episode rewards before it compares times, so it never times two different workloads.

    python benchmarks/vs_lerobot_eval.py                   # PASS when eval.py is >= 2x faster
    python benchmarks/vs_lerobot_eval.py --no-videos       # the same without any video
    python benchmarks/vs_lerobot_eval.py --passive-openmp-both   # lerobot-eval gets eval.py's OpenMP setting too
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ENV, ROOT, verdict  # noqa: E402

TARGET = 2.0
SEED = 1000


def lerobot_eval_command(checkpoint: Path, out: Path, args: argparse.Namespace) -> list[str]:
    # The lerobot-eval of this interpreter: LeRobot 0.6.x on Python 3.12, 0.4.4 on 3.11 (same torch as eval.py).
    executable = Path(sys.executable).parent / "lerobot-eval"
    base = [str(executable)] if executable.exists() else [sys.executable, "-m", "lerobot.scripts.lerobot_eval"]
    return [
        *base,
        f"--policy.path={checkpoint}",
        f"--policy.device={args.device}",
        "--env.type=pusht",
        f"--env.episode_length={args.episode_length}",
        f"--eval.n_episodes={args.episodes}",
        f"--eval.batch_size={args.batch_size}",
        f"--seed={SEED}",
        f"--output_dir={out}",
    ]


def our_command(checkpoint: Path, out: Path, args: argparse.Namespace) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "eval.py"),
        f"hydra.run.dir={out}",
        "env=pusht",
        "policy=act",
        f"policy.path={checkpoint}",
        f"device={args.device}",
        f"env.episode_length={args.episode_length}",
        f"eval.n_episodes={args.episodes}",
        f"eval.batch_size={args.batch_size}",
        f"eval.max_episodes_rendered={0 if args.no_videos else args.episodes}",
        f"seed={SEED}",
    ]


def timed(command: list[str], extra_env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and the children it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env={**ENV, **(extra_env or {})}, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{command[0]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def lerobot_rewards(out: Path) -> list[float]:
    info = json.loads((out / "eval_info.json").read_text())
    return [float(r) for task in info["per_task"] for r in task["metrics"]["sum_rewards"]]


def our_rewards(out: Path) -> list[float]:
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return [float(r["sum_reward"]) for r in sorted(records, key=lambda r: r["episode_index"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--episode-length", type=int, default=300)
    parser.add_argument("--no-videos", action="store_true", help="our side films nothing (lerobot-eval always does)")
    parser.add_argument(
        "--passive-openmp-both",
        action="store_true",
        help="run lerobot-eval with OMP_WAIT_POLICY=PASSIVE, as eval.py sets for itself, to isolate that setting",
    )
    args = parser.parse_args()

    from tests.lerobot_checkpoints import PUSHT_ACTION, PUSHT_PIXELS, tiny_act

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        checkpoint = tiny_act(root / "act_pusht", PUSHT_PIXELS, PUSHT_ACTION)
        theirs_out, ours_out = root / "lerobot_eval", root / "ours"
        openmp = {"OMP_WAIT_POLICY": "PASSIVE"} if args.passive_openmp_both else None
        theirs = timed(lerobot_eval_command(checkpoint, theirs_out, args), openmp)
        ours = timed(our_command(checkpoint, ours_out, args))
        their_rewards, my_rewards = lerobot_rewards(theirs_out), our_rewards(ours_out)
        if len(their_rewards) != len(my_rewards) or not all(
            math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6) for a, b in zip(their_rewards, my_rewards, strict=True)
        ):
            raise SystemExit(f"the runs disagree, so they are not the same workload: {their_rewards} vs {my_rewards}")
        their_videos = len(list((theirs_out / "videos").rglob("*.mp4")))
        my_videos = len(list((ours_out / "videos").rglob("*.mp4"))) if (ours_out / "videos").exists() else 0

    (theirs, their_cpu), (ours, my_cpu) = theirs, ours
    print(
        f"lerobot-eval: {theirs:.1f} s wall, {their_cpu:.1f} s CPU, {their_videos} videos   "
        f"eval.py: {ours:.1f} s wall, {my_cpu:.1f} s CPU, {my_videos} videos"
    )
    print(f"per-episode rewards identical on both sides: {[round(r, 4) for r in my_rewards]}")
    detail = (
        f"ACT on PushT, {args.episodes} episodes x {args.episode_length} steps, batch {args.batch_size}, "
        f"{args.device}, {'no videos on our side' if args.no_videos else 'all episodes filmed on both sides'}"
        f"{', OMP_WAIT_POLICY=PASSIVE on both sides' if args.passive_openmp_both else ''}"
    )
    verdict("eval.py vs lerobot-eval wall time", theirs / ours, TARGET, detail)


if __name__ == "__main__":
    main()
