"""Soak: a long MetaWorld run in which a random simulator worker is SIGKILLed (as the OOM killer would) every
`--kill-every` seconds must complete with records equal to an undisturbed run's (docs/faults.md).

    python -m speed.soak_worker_kills                              # ~20 min, a kill a minute
    python -m speed.soak_worker_kills --episodes 12 --kill-every 5  # short version

Both runs use random actions on five MetaWorld tasks with state observations and two workers; the disturbed run goes
first, then the undisturbed one. Records are compared without their wall time. The ratio printed is the undisturbed
run's wall time over the disturbed one's (the cost of the restarts; information, target > 0).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from devkit.worker_kills import kill_a_worker, outcomes, recorded, start_eval
from speed.harness.timing import verdict

TASKS = "env.task=[reach-v3,push-v3,drawer-open-v3,door-open-v3,button-press-v3]"


def overrides(episodes: int, retries: int) -> list[str]:
    return [
        TASKS,
        "policy=random",
        "env.obs_type=state",
        f"eval.n_episodes={episodes}",
        "eval.batch_size=2",
        f"eval.worker_retries={retries}",
    ]


def run(out: Path, args: list[str], kill_every: float | None, seed: int) -> tuple[float, int, str]:
    """Wall time, workers killed, and the output of one eval.py run (killing a worker every `kill_every` s)."""
    rng = random.Random(seed)
    started = time.monotonic()
    proc = start_eval(out, args)
    kills = 0
    next_kill = started + (kill_every or 0)
    while proc.poll() is None:
        time.sleep(0.2)
        if kill_every is not None and time.monotonic() >= next_kill:
            if kill_a_worker(proc.pid, rng) is not None:
                kills += 1
                print(f"  {time.monotonic() - started:7.1f} s: killed a worker ({recorded(out)} recorded)", flush=True)
            next_kill += kill_every
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"eval.py failed ({proc.returncode}):\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return time.monotonic() - started, kills, stdout + stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=240, help="episodes per task (5 tasks; 240: ~20 min)")
    parser.add_argument("--kill-every", type=float, default=60.0, help="seconds between kills")
    parser.add_argument("--seed", type=int, default=0, help="which worker each kill picks")
    opts = parser.parse_args()
    # Each kill lands on some episode; a kill every few seconds may hit the same one more than twice.
    args = overrides(opts.episodes, retries=100)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"disturbed run: a worker killed every {opts.kill_every:g} s", flush=True)
        killed_s, kills, output = run(Path(tmp) / "killed", args, opts.kill_every, opts.seed)
        replaced = output.count("replaced it and restarted the episodes in flight")
        print("undisturbed run", flush=True)
        clean_s, _, _ = run(Path(tmp) / "clean", args, None, opts.seed)
        disturbed, clean = outcomes(Path(tmp) / "killed"), outcomes(Path(tmp) / "clean")
    equal = disturbed == clean and len(clean) == 5 * opts.episodes
    detail = (
        f"{len(disturbed)} episodes, {kills} workers killed, {replaced} replaced; records "
        f"{'EQUAL' if equal else 'DIFFERENT'} to the undisturbed run's (disturbed {killed_s:.1f} s, undisturbed "
        f"{clean_s:.1f} s)"
    )
    ok = verdict(f"soak: a worker killed every {opts.kill_every:g} s", clean_s / killed_s, 0.0, detail)
    # A kill that lands as the run closes its workers needs no replacement; every other one is replaced.
    sys.exit(0 if ok and equal and kills > 0 and replaced > 0 else 1)


if __name__ == "__main__":
    main()
