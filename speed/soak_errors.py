"""Soak: a long MetaWorld sweep on 2 local shards whose simulator raises on about 1% of the episodes must finish,
count its error episodes exactly, and record every other episode as the same sweep without faults does
(docs/faults.md#error-episodes).

    python -m speed.soak_errors                              # 5 tasks x 240 episodes: a ~10 min faulty sweep
    python -m speed.soak_errors --episodes 480               # a ~20 min faulty sweep (on the 2-core VM)
    python -m speed.soak_errors --episodes 40 --length 150   # short version, ~3 min in all

The faulty episodes are chosen by (task, episode index) (devkit/faulty_env.py, `fault_rate`): about half fail once
(the retry in a fresh worker must equal the fault-free run), the others every time (error episodes: the sweep exits
3 and the merge's `n_errors` must be their number). The fault-free sweep (FAULTY_ENV_OFF=1) runs second. The ratio
printed is the fault-free sweep's wall time over the faulty one's (the cost of the retries; information, > 0).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from devkit.faulty_env import ALWAYS, ONCE, FaultSettings, planned_faults
from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig
from speed.harness.timing import ROOT, verdict

TASKS = ["reach-v3", "push-v3", "drawer-open-v3", "door-open-v3", "button-press-v3"]


def overrides(episodes: int, length: int | None, rate: float, fault_dir: Path) -> list[str]:
    return [
        f"env.task=[{','.join(TASKS)}]",
        "env._target_=devkit.faulty_env.FaultyMetaWorldEnvConfig",
        f"+env.fault_rate={rate}",
        "+env.fault_step=50",
        f"+env.fault_dir={fault_dir}",
        *([f"env.episode_length={length}"] if length else []),
        "policy=random",
        "env.obs_type=state",
        f"eval.n_episodes={episodes}",
        "eval.batch_size=2",
        "eval.max_episodes_rendered=0",
        "eval.shard_id=0,1",
        "hydra/launcher=local_shards",
    ]


def sweep(out: Path, args: list[str], faults_off: bool) -> tuple[float, int, dict[str, Any]]:
    """Wall time, exit code and merged eval_info.json of one sweep."""
    env = {**os.environ, "FAULTY_ENV_OFF": "1" if faults_off else "0"}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "eval.py"), "-m", f"hydra.sweep.dir={out}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if proc.returncode not in (0, 3) or not (out / "eval_info.json").is_file():
        raise SystemExit(f"the sweep failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, proc.returncode, json.loads((out / "eval_info.json").read_text())


def outcomes(info: dict[str, Any]) -> dict[tuple[str, int, int], tuple]:
    """Each episode's outcome (what must not depend on faults, batching or sharding); error episodes: None."""
    return {
        (e["task_group"], e["task_id"], e["episode_index"]): None
        if e.get("error")
        else (e["seed"], e["success"], round(e["sum_reward"], 6), e["steps"])
        for e in info["episodes"]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=240, help="episodes per task (5 tasks; 240: ~10 min)")
    parser.add_argument("--length", type=int, default=None, help="steps per episode (MetaWorld's 500 by default)")
    parser.add_argument("--rate", type=float, default=0.01, help="share of the episodes whose simulator raises")
    opts = parser.parse_args()
    tasks = [t.key for t in MetaWorldEnvConfig(task=TASKS, obs_type="state").tasks()]
    planned = planned_faults(FaultSettings(fault_rate=opts.rate), tasks, opts.episodes)
    always = {u for u, mode in planned.items() if mode == ALWAYS}
    once = {u for u, mode in planned.items() if mode == ONCE}
    print(f"{len(tasks) * opts.episodes} episodes: {len(once)} fail once, {len(always)} every time", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        markers = Path(tmp) / "markers"
        markers.mkdir()
        args = overrides(opts.episodes, opts.length, opts.rate, markers)
        print("faulty sweep (2 local shards)", flush=True)
        faulty_s, code, faulty = sweep(Path(tmp) / "faulty", args, faults_off=False)
        failed_once = len(list(markers.iterdir()))
        print("fault-free sweep", flush=True)
        clean_s, _, clean = sweep(Path(tmp) / "clean", args, faults_off=True)
    got, want = outcomes(faulty), outcomes(clean)
    errored = {u for u, o in got.items() if o is None}
    others_equal = {u: o for u, o in got.items() if o is not None} == {u: o for u, o in want.items() if u not in always}
    exact = errored == always and faulty["overall"]["n_errors"] == len(always) and failed_once == len(once)
    finished = len(got) == len(want) == len(tasks) * opts.episodes and code == (3 if always else 0)
    detail = (
        f"{len(got)} episodes; n_errors {faulty['overall']['n_errors']} (planned {len(always)}), {failed_once} failed "
        f"once and were retried (planned {len(once)}); every other episode {'EQUAL' if others_equal else 'DIFFERENT'} "
        f"to the fault-free sweep's; exit {code} (faulty {faulty_s:.1f} s, fault-free {clean_s:.1f} s)"
    )
    ok = verdict(f"soak: {opts.rate:.0%} of the episodes raise", clean_s / faulty_s, 0.0, detail)
    sys.exit(0 if ok and exact and others_equal and finished else 1)


if __name__ == "__main__":
    main()
