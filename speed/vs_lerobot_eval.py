"""Versus lerobot-eval 0.6: one LeRobot checkpoint per workload, through LeRobot's own CLI and through eval.py.

Run it with the Python 3.12 environment that has LeRobot 0.6.x (the same torch on both sides):
`/work/py312/bin/python -m speed.vs_lerobot_eval`.

Workloads, each with a tiny ACT (ResNet-18 backbone, random but seeded weights, built locally with LeRobot's
classes and saved with its processors), on the CPU (or --device), batch 2, seeds from 1000, every episode filmed:
- PushT (pixels_agent_pos), 4 episodes of 300 steps;
- LIBERO, task 0 of libero_spatial and of libero_10, 3 episodes each, at each suite's own step limit (280 and 520,
  as lerobot-eval sets them): episodes of unequal lengths across the tasks, and per task one more episode than a
  batch holds. The cameras are 64x64 on both sides (lerobot-eval defaults to 360x360, eval.py to 256x256).
lerobot-eval runs with `--eval.use_async_envs=false`: its async workers fail on this machine (PushT: gym_pusht is
not registered in them). eval.py uses its defaults (async workers, refill, mixed-task batches, only read cameras
rendered). Wall time is process start to exit, so imports, simulator creation and video encoding count.

The two runs must agree episode by episode (success and summed reward per episode; same seeds, initial states,
deterministic policy): the script checks that before it compares times, so it never times two different workloads.

    python -m speed.vs_lerobot_eval                   # PASS per workload when eval.py is >= 2x faster
    python -m speed.vs_lerobot_eval --only libero     # one workload
    python -m speed.vs_lerobot_eval --no-videos       # our side films nothing
    python -m speed.vs_lerobot_eval --passive-openmp-both   # lerobot-eval gets eval.py's OpenMP setting too
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
from dataclasses import dataclass
from pathlib import Path

from speed.harness.timing import ENV, ROOT, verdict

TARGET = 2.0
SEED = 1000
LIBERO_ACTION = (7, 0.0, 0.2)  # LIBERO acts in [-1, 1]^7: end-effector deltas and the gripper


@dataclass(frozen=True)
class Workload:
    name: str
    theirs: list[str]  # lerobot-eval arguments besides policy, seed, output dir
    ours: list[str]  # eval.py overrides besides the policy path, seed, output dir
    detail: str


def pusht(args: argparse.Namespace) -> Workload:
    filmed = 0 if args.no_videos else args.episodes
    return Workload(
        "PushT",
        [
            "--env.type=pusht",
            f"--env.episode_length={args.episode_length}",
            f"--eval.n_episodes={args.episodes}",
            f"--eval.batch_size={args.batch_size}",
            "--eval.use_async_envs=false",  # its async workers fail here (gym_pusht is not registered in them)
        ],
        [
            "env=pusht",
            f"env.episode_length={args.episode_length}",
            f"eval.n_episodes={args.episodes}",
            f"eval.batch_size={args.batch_size}",
            f"eval.max_episodes_rendered={filmed}",
        ],
        f"tiny ACT on PushT, {args.episodes} episodes x {args.episode_length} steps, batch {args.batch_size}",
    )


def libero(args: argparse.Namespace) -> Workload:
    suites, size = args.libero_suites, args.libero_size
    filmed = 0 if args.no_videos else args.libero_episodes
    limit = args.libero_episode_length
    return Workload(
        "LIBERO",
        [
            "--env.type=libero",
            f"--env.task={suites}",
            "--env.task_ids=[0]",
            f"--env.observation_height={size}",
            f"--env.observation_width={size}",
            f"--eval.n_episodes={args.libero_episodes}",
            f"--eval.batch_size={args.batch_size}",
            "--eval.use_async_envs=false",  # its async workers fail on this machine
            *([f"--env.episode_length={limit}"] if limit else []),
        ],
        [
            "env=libero",
            f"env.task=[{suites}]",
            "env.task_ids=[0]",
            f"env.observation_height={size}",
            f"env.observation_width={size}",
            f"eval.n_episodes={args.libero_episodes}",
            f"eval.batch_size={args.batch_size}",
            f"eval.max_episodes_rendered={filmed}",
            *([f"env.episode_length={limit}"] if limit else []),
        ],
        f"tiny ACT on LIBERO {suites} task 0 each ({f'{limit} steps' if limit else 'per-suite step limits'}), "
        f"{args.libero_episodes} episodes per "
        f"task, {size}x{size} cameras, batch {args.batch_size}",
    )


def lerobot_eval_command(checkpoint: Path, out: Path, workload: Workload, args: argparse.Namespace) -> list[str]:
    # The lerobot-eval of this interpreter: LeRobot 0.6.x on Python 3.12 (same torch as eval.py).
    executable = Path(sys.executable).parent / "lerobot-eval"
    base = [str(executable)] if executable.exists() else [sys.executable, "-m", "lerobot.scripts.lerobot_eval"]
    policy = [f"--policy.path={checkpoint}", f"--policy.device={args.device}"]
    return [*base, *policy, *workload.theirs, f"--seed={SEED}", f"--output_dir={out}"]


def our_command(checkpoint: Path, out: Path, workload: Workload, args: argparse.Namespace) -> list[str]:
    policy = ["policy=act", f"policy.path={checkpoint}", f"device={args.device}"]
    return [sys.executable, str(ROOT / "eval.py"), f"hydra.run.dir={out}", *policy, *workload.ours, f"seed={SEED}"]


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


def lerobot_outcomes(out: Path) -> dict[tuple[str, int], list[tuple[bool, float]]]:
    info = json.loads((out / "eval_info.json").read_text())
    return {
        (task["task_group"], int(task["task_id"])): list(
            zip(map(bool, task["metrics"]["successes"]), map(float, task["metrics"]["sum_rewards"]), strict=True)
        )
        for task in info["per_task"]
    }


def our_outcomes(out: Path) -> dict[tuple[str, int], list[tuple[bool, float]]]:
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    outcomes: dict[tuple[str, int], list[tuple[bool, float]]] = {}
    for r in sorted(records, key=lambda r: (r["task_group"], r["task_id"], r["episode_index"])):
        outcomes.setdefault((r["task_group"], int(r["task_id"])), []).append((bool(r["success"]), r["sum_reward"]))
    return outcomes


def same(theirs: dict, ours: dict) -> bool:
    def agree(a: tuple[bool, float], b: tuple[bool, float]) -> bool:
        return a[0] == b[0] and math.isclose(a[1], b[1], rel_tol=1e-6, abs_tol=1e-6)

    return theirs.keys() == ours.keys() and all(
        len(theirs[k]) == len(ours[k]) and all(map(agree, theirs[k], ours[k])) for k in theirs
    )


def compare(workload: Workload, checkpoint: Path, root: Path, args: argparse.Namespace, extra: dict[str, str]) -> bool:
    theirs_out, ours_out = root / f"lerobot_eval_{workload.name}", root / f"ours_{workload.name}"
    openmp = {"OMP_WAIT_POLICY": "PASSIVE"} if args.passive_openmp_both else {}
    theirs = timed(lerobot_eval_command(checkpoint, theirs_out, workload, args), {**extra, **openmp})
    ours = timed(our_command(checkpoint, ours_out, workload, args))
    their_outcomes, my_outcomes = lerobot_outcomes(theirs_out), our_outcomes(ours_out)
    if not same(their_outcomes, my_outcomes):
        raise SystemExit(
            f"{workload.name}: the runs disagree, so they are not the same workload: {their_outcomes} vs {my_outcomes}"
        )
    their_videos = len(list((theirs_out / "videos").rglob("*.mp4"))) if (theirs_out / "videos").exists() else 0
    my_videos = len(list((ours_out / "videos").rglob("*.mp4"))) if (ours_out / "videos").exists() else 0
    steps = [json.loads(line)["steps"] for line in (ours_out / "episodes.jsonl").read_text().splitlines()]
    (theirs_s, their_cpu), (ours_s, my_cpu) = theirs, ours
    print(
        f"{workload.name}: lerobot-eval {theirs_s:.1f} s wall, {their_cpu:.1f} s CPU, {their_videos} videos; "
        f"eval.py {ours_s:.1f} s wall, {my_cpu:.1f} s CPU, {my_videos} videos; episode steps {sorted(steps)}"
    )
    print(f"{workload.name}: per-episode (success, sum reward) identical on both sides: {my_outcomes}")
    detail = f"{workload.detail}, {args.device}{', OMP_WAIT_POLICY=PASSIVE on both sides' if openmp else ''}"
    return verdict(f"{workload.name}: eval.py vs lerobot-eval wall time", theirs_s / ours_s, TARGET, detail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["pusht", "libero"], help="run one workload (default: both)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--episodes", type=int, default=4, help="PushT episodes")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--episode-length", type=int, default=300, help="PushT step limit")
    parser.add_argument("--libero-suites", default="libero_spatial,libero_10", help="task 0 of each")
    parser.add_argument("--libero-episodes", type=int, default=3, help="LIBERO episodes per task")
    parser.add_argument("--libero-size", type=int, default=64, help="LIBERO camera height and width")
    parser.add_argument("--libero-episode-length", type=int, help="one step limit for every task (a quick check)")
    parser.add_argument("--no-videos", action="store_true", help="our side films nothing (lerobot-eval always does)")
    parser.add_argument(
        "--passive-openmp-both",
        action="store_true",
        help="run lerobot-eval with OMP_WAIT_POLICY=PASSIVE, as eval.py sets for itself, to isolate that setting",
    )
    args = parser.parse_args()

    from devkit.lerobot_checkpoints import PUSHT_ACTION, PUSHT_PIXELS, tiny_act

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.only in (None, "pusht"):
            checkpoint = tiny_act(root / "act_pusht", PUSHT_PIXELS, PUSHT_ACTION)
            results.append(compare(pusht(args), checkpoint, root, args, {}))
        if args.only in (None, "libero"):
            from speed.harness.libero_overlay import libero_overlay

            size = args.libero_size
            features = {"observation.images.image": ("VISUAL", (3, size, size)), "observation.state": ("STATE", (8,))}
            checkpoint = tiny_act(root / "act_libero", features, LIBERO_ACTION)
            gl = {"MUJOCO_GL": ENV["MUJOCO_GL"], "PYOPENGL_PLATFORM": ENV["MUJOCO_GL"]}
            results.append(compare(libero(args), checkpoint, root, args, {**gl, **libero_overlay(root)}))
    raise SystemExit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
