"""A short run's fixed cost (everything but its episodes): eval.py vs lerobot-eval 0.6 on the same workload.

Run it with the Python 3.12 environment that has LeRobot 0.6.x: `.venv312/bin/python -m speed.fixed_cost`.

The workload of `speed.vs_lerobot_eval`'s PushT row (a tiny ACT built locally, PushT pixels, batch 2, every episode
filmed, seeds from 1000, lerobot-eval in-process as there) at 1 and at N episodes (default 4), each side's best of
`--repeats` alternating fresh processes. Per side: per episode = (t(N) - t(1)) / (N - 1), fixed cost = t(1) - per
episode: process start, imports, policy load, simulators, publishing and exit. PASS when eval.py's fixed cost is at
most lerobot-eval's (the ratio theirs / ours >= 1). Also prints where eval.py's 1-episode run spends its time, from
the moments its output lines appear: composing and validating the config, loading the policy (while the workers
start), the episode, publishing (eval_info.json, the plot, the report, the video), and the exit.

    .venv312/bin/python -m speed.fixed_cost                  # 1 and 4 episodes, best of 2
    .venv312/bin/python -m speed.fixed_cost --episodes 16 --repeats 1
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from speed.harness.timing import ENV, ROOT, verdict
from speed.vs_lerobot_eval import (
    lerobot_eval_command,
    lerobot_outcomes,
    our_command,
    our_outcomes,
    pusht,
    same,
)

TARGET = 1.0
# eval.py's output lines that end each phase of its run, in order (the progress line: the task's episodes done).
MILESTONES = (("config", "MUJOCO_GL="), ("policy", "loaded the act policy"), ("episodes", " episodes, "))
PUBLISHED = "Report: "


def stamped(command: list[str]) -> tuple[float, dict[str, float]]:
    """Wall time of `command` (start to exit) and when each milestone's line appeared."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[str, float] = {}
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            now = time.perf_counter() - start
            for name, text in (*MILESTONES, ("published", PUBLISHED)):
                if text in line and name not in seen:
                    seen[name] = now

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait()
    elapsed = time.perf_counter() - start
    reader.join(timeout=10)
    if code != 0:
        raise SystemExit(f"{command[0]} failed ({code}):\n{''.join(lines)[-3000:]}")
    return elapsed, seen


def breakdown(total: float, seen: dict[str, float]) -> str:
    parts, last = [], 0.0
    for name in (*(m[0] for m in MILESTONES), "published"):
        if name in seen:
            parts.append(f"{name} {seen[name] - last:.1f} s")
            last = seen[name]
    parts.append(f"exit {total - last:.1f} s")
    return ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=4, help="N, the longer run's episodes (>= 2)")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs per side and size; best counts")
    parser.add_argument("--episode-length", type=int, default=300, help="PushT step limit")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    args.no_videos, args.passive_openmp_both = False, False

    from devkit.lerobot_checkpoints import PUSHT_ACTION, PUSHT_PIXELS, tiny_act

    best: dict[tuple[str, int], float] = {}
    ours_seen: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        checkpoint = tiny_act(root / "act_pusht", PUSHT_PIXELS, PUSHT_ACTION)
        for r in range(args.repeats):
            for n in (1, args.episodes):
                workload = pusht(argparse.Namespace(**{**vars(args), "episodes": n}))
                theirs_out, ours_out = root / f"theirs_{n}_{r}", root / f"ours_{n}_{r}"
                theirs, _ = stamped(lerobot_eval_command(checkpoint, theirs_out, workload, args))
                ours, seen = stamped(our_command(checkpoint, ours_out, workload, args))
                if not same(lerobot_outcomes(theirs_out), our_outcomes(ours_out)):
                    raise SystemExit(f"{n} episodes: the two runs disagree, so they are not the same workload")
                print(f"run {r + 1}, {n} episode(s): lerobot-eval {theirs:.1f} s, eval.py {ours:.1f} s", flush=True)
                if n == 1 and ours < best.get(("ours", 1), float("inf")):
                    ours_seen = {**seen, "total": ours}
                for side, t in (("theirs", theirs), ("ours", ours)):
                    best[side, n] = min(best.get((side, n), float("inf")), t)
    fixed = {}
    for side, name in (("theirs", "lerobot-eval"), ("ours", "eval.py")):
        per_episode = (best[side, args.episodes] - best[side, 1]) / (args.episodes - 1)
        fixed[side] = best[side, 1] - per_episode
        print(
            f"{name}: 1 episode {best[side, 1]:.1f} s, {args.episodes} episodes {best[side, args.episodes]:.1f} s: "
            f"{per_episode:.2f} s per episode, fixed cost {fixed[side]:.1f} s"
        )
    total = ours_seen.pop("total")
    print(f"eval.py's 1-episode run ({total:.1f} s): {breakdown(total, ours_seen)}")
    detail = (
        f"lerobot-eval {fixed['theirs']:.1f} s vs eval.py {fixed['ours']:.1f} s; tiny ACT on PushT, "
        f"{args.episode_length} steps, batch {args.batch_size}, every episode filmed, {args.device}"
    )
    ratio = fixed["theirs"] / max(fixed["ours"], 0.01)
    ok = verdict("fixed cost: lerobot-eval / eval.py", ratio, TARGET, detail)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
