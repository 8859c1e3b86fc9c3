"""LIBERO with its simulator workers in another environment (env.python) vs the workers this interpreter forks.

    python -m speed.foreign_workers --python .venvs/metaworld-mujoco-3.3.0/bin/python   # or .venv312/bin/python

The workload of speed/vs_libero_loop.py (libero_spatial tasks 0 and 1, 2 episodes each of 40 steps, batch 2, a tiny
ACT reading both 256 px cameras and the state, on the CPU), run by eval.py twice: with the simulators in workers
forked by this interpreter, and with them in workers of `--python` (an environment with the same simulator versions:
`SIM_ENV_SYSTEM_SITE=1 bash scripts/sim_env.sh metaworld <dir> mujoco==3.3.0` from the 3.11 base, which holds
LIBERO too). Each side runs `--repeats` times, alternately, as fresh processes timed from start to exit; the best
of each is compared. Per-episode outcomes must be identical, else the script stops. Ratio = in-family / foreign
wall time; target >= 0.95.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from speed.harness.timing import verdict
from speed.vs_libero_loop import LIBERO_ACTION, our_command, our_outcomes, run

TARGET = 0.95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="env.python: the simulator environment's interpreter")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side (best counts)")
    parser.add_argument("--episodes", type=int, default=2, help="per task, one batch")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()

    from devkit.lerobot_checkpoints import tiny_act

    python = str(Path(args.python).absolute())
    times: dict[str, list[float]] = {"here": [], "foreign": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        features = {
            "observation.images.image": ("VISUAL", (3, args.size, args.size)),
            "observation.images.image2": ("VISUAL", (3, args.size, args.size)),
            "observation.state": ("STATE", (8,)),
        }
        checkpoint = tiny_act(root / "act", features, LIBERO_ACTION)
        for repeat in range(args.repeats):
            here, foreign = root / f"here_{repeat}", root / f"foreign_{repeat}"
            times["here"].append(run(our_command(checkpoint, here, args.size, False, args))[0])
            command = [*our_command(checkpoint, foreign, args.size, False, args), f"env.python={python}"]
            times["foreign"].append(run(command)[0])
            if our_outcomes(here) != our_outcomes(foreign):
                raise SystemExit(f"the two sides disagree:\n{our_outcomes(here)}\n{our_outcomes(foreign)}")
            print(f"run {repeat + 1}: in-family {times['here'][-1]:.1f} s, foreign {times['foreign'][-1]:.1f} s")
    here_s, foreign_s = min(times["here"]), min(times["foreign"])
    detail = f"best of {args.repeats} alternating: in-family {here_s:.1f} s, env.python {foreign_s:.1f} s"
    detail += "; outcomes identical"
    raise SystemExit(
        0 if verdict("LIBERO in another environment vs in-family workers", here_s / foreign_s, TARGET, detail) else 1
    )


if __name__ == "__main__":
    main()
