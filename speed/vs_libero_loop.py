"""eval.py vs a hand-written loop (speed/baselines/libero_loop.py) on the same LIBERO work: the machine's limit.

    .venv312/bin/python -m speed.vs_libero_loop               # 256 and 360 px, filmed or not
    .venv312/bin/python -m speed.vs_libero_loop --sizes 256 --film on --breakdown

The workload of issue 29: libero_spatial tasks 0 and 1, 2 episodes each of 40 steps, batch 2 (= episodes per
task, so both sides run equal-length episodes side by side and refill has nothing to win), a tiny ACT
(ResNet-18 backbone, random but seeded weights, built locally with LeRobot's classes) reading both cameras and the
8-D state, on the CPU. Both sides use 2 worker processes with `cores / workers` OSMesa render threads each, the
same episode protocol and the same x264 settings when filming. Each configuration runs the two sides alternately,
`--repeats` times each, as fresh processes timed from start to exit; the best of each is compared. Per-episode
outcomes (success, steps, summed reward) must be identical, and so must the last frame of every filmed episode
(decoded from both sides' videos), else the script stops: it never times two different workloads.
Ratio = bare / eval.py wall time; target >= 0.95. `--breakdown` adds one run of each side under py-spy and prints
where the time of every process went (speed/harness/breakdown.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from speed.harness.breakdown import print_breakdown, profiled
from speed.harness.timing import ENV, ROOT, verdict

TARGET = 0.95
LIBERO_ACTION = (7, 0.0, 0.2)  # LIBERO acts in [-1, 1]^7: end-effector deltas and the gripper
TASKS = [("libero_spatial", 0), ("libero_spatial", 1)]


def bare_command(checkpoint: Path, out: Path, size: int, film: bool, args: argparse.Namespace) -> list[str]:
    tasks = ",".join(f"{suite}:{task_id}" for suite, task_id in TASKS)
    return [
        sys.executable, "-m", "speed.baselines.libero_loop", f"--checkpoint={checkpoint}", f"--out={out}",
        f"--tasks={tasks}", f"--episodes={args.episodes}", f"--steps={args.steps}", f"--size={size}",
        *(["--film"] if film else []),
    ]  # fmt: skip


def our_command(checkpoint: Path, out: Path, size: int, film: bool, args: argparse.Namespace) -> list[str]:
    ids = sorted({task_id for _, task_id in TASKS})
    return [
        sys.executable, str(ROOT / "eval.py"), f"hydra.run.dir={out}", "env=libero", "env.task=libero_spatial",
        f"env.task_ids={ids}", f"env.observation_height={size}", f"env.observation_width={size}",
        f"env.episode_length={args.steps}", "policy=act", f"policy.path={checkpoint}", "seed=1000",
        f"eval.n_episodes={args.episodes}", f"eval.batch_size={args.episodes}",
        f"eval.max_episodes_rendered={args.episodes if film else 0}",
    ]  # fmt: skip


def run(command: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{command[1]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout


def bare_outcomes(stdout: str) -> list[list]:
    return sorted([name, k, bool(ok), steps, round(reward, 6)] for name, k, ok, steps, reward in json.loads(
        stdout.strip().splitlines()[-1]))  # fmt: skip


def our_outcomes(out: Path) -> list[list]:
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return sorted(
        [f"{r['task_group']}_{r['task_id']}", r["episode_index"], bool(r["success"]), r["steps"],
         round(r["sum_reward"], 6)] for r in records
    )  # fmt: skip


def decoded(path: Path) -> list:
    import av

    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def film_difference(bare_out: Path, our_out: Path) -> str | None:
    """None when both sides filmed the same episodes with the same last decoded frame; else which video differs,
    from which frame on, and by how much."""
    import numpy as np

    ours = sorted(our_out.rglob("*.mp4"), key=lambda p: (p.parent.name, p.name))
    bare = sorted(bare_out.glob("*.mp4"), key=lambda p: (p.parent.name, p.name))
    if len(ours) != len(bare):
        return f"{len(bare)} videos against {len(ours)}"
    for bare_video, our_video in zip(bare, ours, strict=True):
        theirs, mine = decoded(bare_video), decoded(our_video)
        if np.array_equal(theirs[-1], mine[-1]):
            continue
        pairs = list(zip(theirs, mine, strict=False))  # a side may have filmed more frames
        first = next((k for k, (a, b) in enumerate(pairs) if not np.array_equal(a, b)), None)
        largest = max(int(np.abs(a.astype(int) - b.astype(int)).max()) for a, b in pairs)
        return (
            f"{our_video.relative_to(our_out)}: {len(mine)} frames against {len(theirs)}, first different frame "
            f"{first}, largest pixel difference {largest}"
        )
    return None


def compare(checkpoint: Path, root: Path, size: int, film: bool, args: argparse.Namespace) -> bool:
    label = f"{size}x{size} px, {'filmed' if film else 'no videos'}"
    times: dict[str, list[float]] = {"bare": [], "ours": []}
    for repeat in range(args.repeats):
        bare_out, our_out = root / f"bare_{size}_{film}_{repeat}", root / f"ours_{size}_{film}_{repeat}"
        elapsed, stdout = run(bare_command(checkpoint, bare_out, size, film, args))
        times["bare"].append(elapsed)
        times["ours"].append(run(our_command(checkpoint, our_out, size, film, args))[0])
        bare, ours = bare_outcomes(stdout), our_outcomes(our_out)
        films = film_difference(bare_out, our_out) if film else None
        if bare != ours or films:
            raise SystemExit(
                f"{label}: the two sides disagree, so they are not the same work:\n{bare}\n{ours}\n{films or ''}"
            )
        print(
            f"{label} run {repeat + 1}: bare {times['bare'][-1]:.1f} s, eval.py {times['ours'][-1]:.1f} s", flush=True
        )
    bare_s, ours_s = min(times["bare"]), min(times["ours"])
    detail = (
        f"best of {args.repeats} alternating: bare {bare_s:.1f} s, eval.py {ours_s:.1f} s; per-episode outcomes "
        f"identical{' and the last frame of every video' if film else ''} ({len(ours)} episodes)"
    )
    ok = verdict(f"LIBERO bare loop vs eval.py, {label}", bare_s / ours_s, TARGET, detail)
    if args.breakdown:
        for name, command in (("bare loop", bare_command), ("eval.py", our_command)):
            out = root / f"profiled_{name.replace(' ', '_')}_{size}_{film}"
            keep = args.profiles / f"{out.name}.txt" if args.profiles else None
            samples = profiled(command(checkpoint, out, size, film, args), ROOT, ENV, keep)
            print_breakdown(f"{name}, {label}", samples)
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="256,360", help="camera sizes in pixels")
    parser.add_argument("--film", choices=["both", "on", "off"], default="both")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side per configuration (best counts)")
    parser.add_argument("--episodes", type=int, default=2, help="per task, one batch")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--breakdown", action="store_true", help="one more run of each side under py-spy")
    parser.add_argument("--profiles", type=Path, help="with --breakdown: keep py-spy's raw samples in this folder")
    args = parser.parse_args()

    from devkit.lerobot_checkpoints import tiny_act

    films = {"both": [False, True], "on": [True], "off": [False]}[args.film]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for size in map(int, args.sizes.split(",")):
            features = {
                "observation.images.image": ("VISUAL", (3, size, size)),
                "observation.images.image2": ("VISUAL", (3, size, size)),
                "observation.state": ("STATE", (8,)),
            }
            checkpoint = tiny_act(root / f"act_{size}", features, LIBERO_ACTION)
            results += [compare(checkpoint, root, size, film, args) for film in films]
    raise SystemExit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
