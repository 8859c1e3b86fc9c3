"""Render only what is read (docs/rendering.md): eval.py, which draws a camera only on the steps whose observation
the policy reads, against a hand-written loop that draws every camera at every step.

    .venv312/bin/python -m speed.render_read                     # LIBERO unfilmed and filmed, then MetaWorld pixels
    .venv312/bin/python -m speed.render_read --repeats 2 --served --lerobot-eval

The workload of issue 34: libero_spatial tasks 0 and 1, 6 episodes each of 100 steps, agentview and wrist cameras
at 256x256, batch 2, a tiny ACT (ResNet-18 backbone, random but seeded weights, built locally with LeRobot's
classes) with chunks of 8 actions reading both cameras and the 8-D state, on the CPU. Sides, run alternately,
`--repeats` times each, as fresh processes timed from start to exit (the best of each counts):
- bare: speed/baselines/libero_loop.py with --batch 2 (every camera at every step; videos from the agentview image);
- eval.py: `env=libero`, `eval.render=read` (the default);
- eval.py every_step: `eval.render=every_step`, what skipping saves inside eval.py;
- with --served: eval.py `policy=remote` against `lerobot-hydra-serve` (started first; the client's run is timed);
- with --lerobot-eval: lerobot-eval 0.6 against eval.py with `env=libero_lerobot` (lerobot-eval films every
  episode, so that side films every episode too).
Each LIBERO configuration runs unfilmed and filmed (the first episode of each task). Outcomes (success, steps,
summed reward per episode) must be identical on every side, videos frame for frame between eval.py's settings and
in their last frame against the bare loop, else the script stops: it never times two different workloads.
Then MetaWorld pixels: reach-v3 and push-v3, 6 episodes of 100 steps each, the 480x480 corner2 image LeRobot's
MetaWorld policies read, the same ACT shape, batch 2: eval.py read against every_step.
Targets: eval.py >= 3x the bare loop unfilmed, >= 2x filmed. `--breakdown`: one more run of the bare loop and of
eval.py under py-spy, and where each process's time went (speed/harness/breakdown.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from speed.harness.breakdown import print_breakdown, profiled
from speed.harness.timing import ENV, ROOT, verdict
from speed.vs_libero_loop import bare_outcomes, decoded, film_difference, our_outcomes, run

TARGETS = {False: 3.0, True: 2.0}  # unfilmed, filmed
LIBERO_ACTION = (7, 0.0, 0.2)
METAWORLD_ACTION = (4, 0.0, 0.5)
TASK_IDS = [0, 1]
Command = Callable[[Path, bool], list[str]]


def libero_overrides(args: argparse.Namespace, film: bool, env: str = "libero") -> list[str]:
    return [
        f"env={env}", "env.task=libero_spatial", f"env.task_ids={TASK_IDS}", f"env.observation_height={args.size}",
        f"env.observation_width={args.size}", f"env.episode_length={args.steps}", "seed=1000", "device=cpu",
        f"eval.n_episodes={args.episodes}", f"eval.batch_size={args.batch}",
        f"eval.max_episodes_rendered={1 if film else 0}",
    ]  # fmt: skip


def eval_py(out: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "eval.py"), f"hydra.run.dir={out}", *overrides]


def bare(checkpoint: Path, args: argparse.Namespace) -> Command:
    def command(out: Path, film: bool) -> list[str]:
        tasks = ",".join(f"libero_spatial:{i}" for i in TASK_IDS)
        return [
            sys.executable, "-m", "speed.baselines.libero_loop", f"--checkpoint={checkpoint}", f"--out={out}",
            f"--tasks={tasks}", f"--episodes={args.episodes}", f"--steps={args.steps}", f"--size={args.size}",
            f"--batch={args.batch}", *(["--film", "--filmed=1"] if film else []),
        ]  # fmt: skip

    return command


def ours(checkpoint: Path, args: argparse.Namespace, render: str) -> Command:
    policy = ["policy=act", f"policy.path={checkpoint}", f"eval.render={render}"]
    return lambda out, film: eval_py(out, *libero_overrides(args, film), *policy)


def same_films(a: Path, b: Path) -> str | None:
    """None when both runs filmed the same episodes, frame for frame; else the first difference."""
    import numpy as np

    films_a, films_b = sorted(a.rglob("*.mp4")), sorted(b.rglob("*.mp4"))
    if [p.relative_to(a) for p in films_a] != [p.relative_to(b) for p in films_b]:
        return f"different videos: {films_a} against {films_b}"
    for video_a, video_b in zip(films_a, films_b, strict=True):
        frames_a, frames_b = decoded(video_a), decoded(video_b)
        if len(frames_a) != len(frames_b) or not all(map(np.array_equal, frames_a, frames_b)):
            return f"{video_a.relative_to(a)} differs"
    return None


def served_run(checkpoint: Path, args: argparse.Namespace, out: Path, film: bool) -> float:
    """Wall time of eval.py's client run against a policy server started (and ready) before it."""
    announce = out.parent / f"{out.name}_server.json"
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("lerobot-hydra-serve")), f"hydra.run.dir={out}_server", "policy=act",
         f"policy.path={checkpoint}", *libero_overrides(args, film)[:6], "device=cpu", "serve.host=127.0.0.1",
         "serve.shards=1", f"serve.announce={announce}"],
        cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        while not announce.exists():
            if server.poll() is not None:
                raise SystemExit(f"lerobot-hydra-serve failed:\n{server.stderr.read() if server.stderr else ''}")
            time.sleep(0.2)
        remote = ["policy=remote", f"policy.url={announce}"]
        elapsed, _ = run(eval_py(out, *libero_overrides(args, film), *remote))
        server.wait(timeout=60)  # its one shard completed: it stops by itself
        return elapsed
    finally:
        if server.poll() is None:
            server.kill()


def compare_libero(checkpoint: Path, root: Path, film: bool, args: argparse.Namespace) -> bool:
    label = f"LIBERO, {'one filmed episode per task' if film else 'no videos'}"
    sides: dict[str, Command] = {
        "bare": bare(checkpoint, args),
        "eval.py": ours(checkpoint, args, "read"),
        "eval.py every_step": ours(checkpoint, args, "every_step"),
    }
    times: dict[str, list[float]] = {name: [] for name in [*sides, *(["served"] if args.served else [])]}
    for repeat in range(args.repeats):
        outs = {name: root / f"{name.replace(' ', '_').replace('.', '')}_{film}_{repeat}" for name in times}
        for name, command in sides.items():
            elapsed, stdout = run(command(outs[name], film))
            times[name].append(elapsed)
            if name == "bare":
                bare_stdout = stdout
        if args.served:
            times["served"].append(served_run(checkpoint, args, outs["served"], film))
        reference = our_outcomes(outs["eval.py"])
        for name in times:
            outcomes = bare_outcomes(bare_stdout) if name == "bare" else our_outcomes(outs[name])
            if outcomes != reference:
                raise SystemExit(f"{label}: {name} and eval.py disagree:\n{outcomes}\n{reference}")
        films = [same_films(outs["eval.py"], outs[n]) for n in times if n not in ("bare", "eval.py")] if film else []
        films.append(film_difference(outs["bare"], outs["eval.py"]) if film else None)
        if any(films):
            raise SystemExit(f"{label}: the videos differ: {[f for f in films if f]}")
        print(f"{label} run {repeat + 1}: " + ", ".join(f"{n} {t[-1]:.1f} s" for n, t in times.items()), flush=True)
    best = {name: min(t) for name, t in times.items()}
    detail = (
        f"best of {args.repeats} alternating: " + ", ".join(f"{n} {t:.1f} s" for n, t in best.items())
        + f"; outcomes identical on every side{', videos frame for frame' if film else ''} ({len(reference)} episodes)"
    )  # fmt: skip
    ok = verdict(f"{label}: eval.py vs the bare loop", best["bare"] / best["eval.py"], TARGETS[film], detail)
    print(f"      eval.py read vs every_step: {best['eval.py every_step'] / best['eval.py']:.2f}x", flush=True)
    if args.served:
        print(f"      served (policy=remote) vs the bare loop: {best['bare'] / best['served']:.2f}x", flush=True)
    if args.breakdown:
        for name in ("bare", "eval.py"):
            samples = profiled(sides[name](root / f"profiled_{name}_{film}", film), ROOT, ENV, None)
            print_breakdown(f"{name}, {label}", samples)
    return ok


def compare_lerobot_eval(checkpoint: Path, root: Path, args: argparse.Namespace) -> None:
    from speed.harness.libero_overlay import libero_overlay
    from speed.vs_lerobot_eval import lerobot_outcomes, same, timed
    from speed.vs_lerobot_eval import our_outcomes as outcomes_by_task

    theirs_out, ours_out = root / "lerobot_eval", root / "ours_libero_lerobot"
    command = [
        str(Path(sys.executable).with_name("lerobot-eval")), f"--policy.path={checkpoint}", "--policy.device=cpu",
        "--env.type=libero", "--env.task=libero_spatial", f"--env.task_ids={TASK_IDS}",
        f"--env.observation_height={args.size}", f"--env.observation_width={args.size}",
        f"--env.episode_length={args.steps}", f"--eval.n_episodes={args.episodes}", f"--eval.batch_size={args.batch}",
        "--eval.use_async_envs=false", "--seed=1000", f"--output_dir={theirs_out}",
    ]  # fmt: skip
    gl = {"MUJOCO_GL": ENV["MUJOCO_GL"], "PYOPENGL_PLATFORM": ENV["MUJOCO_GL"]}
    theirs_s, _ = timed(command, {**gl, **libero_overlay(root)})
    filmed = [*libero_overrides(args, True, "libero_lerobot")[:-1], f"eval.max_episodes_rendered={args.episodes}"]
    ours_s, _ = timed(eval_py(ours_out, *filmed, "policy=act", f"policy.path={checkpoint}"))
    if not same(lerobot_outcomes(theirs_out), outcomes_by_task(ours_out)):
        raise SystemExit("lerobot-eval and eval.py (env=libero_lerobot) disagree: not the same workload")
    print(
        f"      lerobot-eval 0.6 vs eval.py (env=libero_lerobot, every episode filmed on both sides): "
        f"{theirs_s / ours_s:.2f}x (lerobot-eval {theirs_s:.1f} s, eval.py {ours_s:.1f} s; outcomes identical)",
        flush=True,
    )


def compare_metaworld(root: Path, args: argparse.Namespace) -> None:
    from devkit.lerobot_checkpoints import tiny_act

    features = {"observation.image": ("VISUAL", (3, 480, 480)), "observation.state": ("STATE", (4,))}
    checkpoint = tiny_act(root / "act_metaworld", features, METAWORLD_ACTION)
    common = [
        "env=metaworld", "env.task=[reach-v3,push-v3]", f"env.episode_length={args.steps}", "seed=1000",
        f"eval.n_episodes={args.episodes}", f"eval.batch_size={args.batch}", "eval.max_episodes_rendered=0",
        "policy=act", f"policy.path={checkpoint}", "device=cpu",
    ]  # fmt: skip
    times: dict[str, list[float]] = {"read": [], "every_step": []}
    for repeat in range(args.repeats):
        for render in times:
            times[render].append(run(eval_py(root / f"mw_{render}_{repeat}", *common, f"eval.render={render}"))[0])
        if our_outcomes(root / f"mw_read_{repeat}") != our_outcomes(root / f"mw_every_step_{repeat}"):
            raise SystemExit("MetaWorld: eval.render=read and every_step disagree")
    read, every = min(times["read"]), min(times["every_step"])
    print(
        f"      MetaWorld pixels (480x480 corner2), eval.py read vs every_step: {every / read:.2f}x "
        f"(best of {args.repeats}: read {read:.1f} s, every_step {every:.1f} s; outcomes identical)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side per configuration (best counts)")
    parser.add_argument("--episodes", type=int, default=6, help="per task")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--size", type=int, default=256, help="LIBERO camera height and width")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--film", choices=["both", "on", "off"], default="both")
    parser.add_argument("--served", action="store_true", help="also eval.py's client against a policy server")
    parser.add_argument("--lerobot-eval", action="store_true", help="also lerobot-eval 0.6 (slow: ~10 min)")
    parser.add_argument("--no-metaworld", action="store_true")
    parser.add_argument("--breakdown", action="store_true", help="one more run of two sides under py-spy")
    args = parser.parse_args()

    from devkit.lerobot_checkpoints import tiny_act

    camera = ("VISUAL", (3, args.size, args.size))
    features = {"observation.images.image": camera, "observation.images.image2": camera}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        checkpoint = tiny_act(root / "act", {**features, "observation.state": ("STATE", (8,))}, LIBERO_ACTION)
        for film in {"both": [False, True], "on": [True], "off": [False]}[args.film]:
            results.append(compare_libero(checkpoint, root, film, args))
        if args.lerobot_eval:
            compare_lerobot_eval(checkpoint, root, args)
        if not args.no_metaworld:
            compare_metaworld(root, args)
    print(json.dumps({"passed": all(results)}))
    raise SystemExit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
