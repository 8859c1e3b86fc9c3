"""The cost of rollout recording (eval.recording=all): wall time and disk, recording on vs off, in the same run.

    python -m speed.recording          # short runs: the fixed cost shows
    python -m speed.recording --long   # MetaWorld state, 2 tasks x 20 episodes
    python -m speed.recording --act    # MetaWorld state with a real policy: a tiny ACT

Whole `python eval.py` runs (LeRobot's dataset code is imported only when recording, and counts), random policy:
MetaWorld state (2 tasks x 4 episodes of 150 steps, batch 2) and PushT pixels + state (96x96, 4 episodes of 150
steps, batch 2), images as video and as PNG frames. `--act`: the MetaWorld workload with a tiny ACT (built locally
by devkit/lerobot_checkpoints.py) instead of random actions, whose per-step cost is a real policy's.
Prints off/on (target >= 0.8 for state: recording costs at most a quarter of the run) and the dataset's bytes per
recorded step; the records must be identical.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from speed.harness.timing import ENV, ROOT, verdict

METAWORLD = ["policy=random", "env.task=[reach-v3,push-v3]", "env.obs_type=state", "env.episode_length=150"]
PUSHT = ["env=pusht", "policy=random", "env.episode_length=150"]
COMMON = ["eval.batch_size=2", "eval.max_episodes_rendered=0"]
EPISODES = ["eval.n_episodes=4"]


def run(*overrides: str) -> tuple[float, list[dict], int, int]:
    """Wall time, the records without wall_s, the recording's bytes and its steps."""
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        cmd = [sys.executable, str(ROOT / "eval.py"), f"hydra.run.dir={out}", *COMMON, *overrides]
        proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"eval.py failed:\n{proc.stdout}\n{proc.stderr}")
        info = json.loads((Path(out) / "eval_info.json").read_text())
        # (rounded as tests/conftest.py's `outcome`: PushT's physics differs in the last bit between runs)
        records = [
            {k: round(v, 6) if isinstance(v, float) else v for k, v in e.items() if k != "wall_s"}
            for e in info["episodes"]
        ]
        files = [p for p in (Path(out) / "recording").rglob("*") if p.is_file()]
        return elapsed, records, sum(p.stat().st_size for p in files), sum(e["steps"] for e in records)


def compare(name: str, workload: list[str], target: float | None, *recording: str) -> bool:
    off_s, off_records, _, _ = run(*workload)
    on_s, on_records, size, steps = run(*workload, "eval.recording=all", *recording)
    same = off_records == on_records
    detail = (
        f"(off {off_s:.1f} s, on {on_s:.1f} s, {size / 1e6:.2f} MB = {size / steps:.0f} B/step, same records: {same})"
    )
    if target is None:
        print(f"INFO  {name}: {off_s / on_s:.2f}x  {detail}", flush=True)
        return same
    return verdict(name, off_s / on_s, target, detail) and same


def act_workload(directory: Path) -> list[str]:
    from devkit.lerobot_checkpoints import tiny_act

    return ["policy=act", f"policy.path={tiny_act(directory / 'act')}", *METAWORLD[1:]]


def main() -> int:
    if "--act" in sys.argv:  # a real policy: LeRobot is imported for it anyway, inference costs per step
        with tempfile.TemporaryDirectory() as tmp:
            workload = act_workload(Path(tmp))
            return 0 if compare("MetaWorld state, tiny ACT, off / on", [*workload, *EPISODES], 0.8) else 1
    if "--long" in sys.argv:  # the fixed cost (importing LeRobot's dataset code) amortized over 40 episodes
        return 0 if compare("MetaWorld state x 20 episodes, off / on", [*METAWORLD, "eval.n_episodes=20"], 0.8) else 1
    ok = compare("MetaWorld state, recording off / on", [*METAWORLD, *EPISODES], 0.8)
    ok &= compare("PushT pixels as video, off / on", [*PUSHT, *EPISODES], None)
    ok &= compare("PushT pixels as PNG, off / on", [*PUSHT, *EPISODES], None, "eval.recording_images=png")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
