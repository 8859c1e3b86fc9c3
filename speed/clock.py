"""What a real-time eval.clock costs when no time passes: `eval.clock.mode=modeled` with no latency and a threshold
of 0 (the same episodes as lockstep, every chunk through policies/clock.py's timed queue) vs lockstep.

    python -m speed.clock

A tiny ACT (chunks of 8) on MetaWorld state, reach-v3 and push-v3 x 6 episodes of up to 500 steps, batch 2, and the
MetaWorld experts planning chunks of 10 (`policy=metaworld_expert policy.chunk=10`), 4 tasks x 10 episodes; each
side best of 3 fresh `eval.py` processes, start to exit, run alternately. Target: the modeled clock within 5% of
lockstep (ratio >= 0.95), with identical episodes.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from speed.harness.timing import timed_eval, verdict

ROUNDS = 3
ZERO = ("eval.clock.mode=modeled", "eval.clock.latency_ms=0", "eval.clock.chunk_size_threshold=0")
ACT = ("env.task=[reach-v3,push-v3]", "env.obs_type=state", "eval.n_episodes=6", "eval.batch_size=2")
EXPERT = ("policy=metaworld_expert", "policy.chunk=10", "env.task=[reach-v3,push-v3,pick-place-v3,door-open-v3]")
EXPERT += ("eval.n_episodes=10", "eval.batch_size=2")


def outcomes(info: dict) -> list[tuple]:
    return sorted(
        (e["task_group"], e["episode_index"], e["success"], round(e["sum_reward"], 6), e["steps"])
        for e in info["episodes"]
    )


def compare(name: str, run: tuple[str, ...]) -> bool:
    times: dict[str, list[float]] = {"lockstep": [], "modeled": []}
    infos: dict[str, dict] = {}
    for _ in range(ROUNDS):
        for side, extra in (("lockstep", ()), ("modeled", ZERO)):
            elapsed, infos[side] = timed_eval(*run, *extra)
            times[side].append(elapsed)
    lockstep_s, modeled_s = min(times["lockstep"]), min(times["modeled"])
    same = outcomes(infos["lockstep"]) == outcomes(infos["modeled"])
    detail = (
        f"(lockstep {lockstep_s:.1f} s, modeled {modeled_s:.1f} s; {'identical' if same else 'DIFFERENT'} episodes)"
    )
    return verdict(f"{name}: modeled clock at 0 ms vs lockstep", lockstep_s / modeled_s, 0.95, detail) and same


def main() -> int:
    from devkit.lerobot_checkpoints import tiny_act

    with tempfile.TemporaryDirectory() as tmp:
        act = ("policy=act", f"policy.path={tiny_act(Path(tmp) / 'act')}", *ACT)
        ok = compare("tiny ACT, MetaWorld state", act)
    ok = compare("MetaWorld experts, chunks of 10", EXPERT) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
