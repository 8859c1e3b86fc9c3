"""Warm rounds: sequential stopping's rounds on one run context (the policy, workers and simulators kept from round
to round) against cold rounds, as they ran before the run context (each round a run of its own in the same run dir:
the policy built, the workers started and every simulator built again), in one process, alternately, best of N.

Workload: 2 MetaWorld tasks with their 128x128 camera read every step (a scripted policy of the image, so that every
step renders), 4 rounds of 2 episodes per task of 60 steps (`eval.sequential.stop=threshold` below 50%: every
episode fails), batch 2 in workers. Both sides' records must be identical.

    python -m speed.warm_rounds [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

TARGET = 1.2
OVERRIDES = [
    "env.task=[reach-v3,push-v3]",
    "env.obs_type=pixels_agent_pos",
    "env.observation_height=128",
    "env.observation_width=128",
    "env.episode_length=60",
    "policy=function",
    "policy.function=__main__.look_and_wait",
    "policy.inputs=[observation.image]",
    "eval.batch_size=2",
    "eval.max_episodes_rendered=0",
    "eval.n_episodes=10",
    "eval.sequential.stop=threshold",
    "eval.sequential.threshold=50",
    "eval.sequential.round=2",
]


def look_and_wait(row: np.ndarray) -> np.ndarray:
    """A stand-in for a policy that reads the image at every step: its mean brightness, and no movement."""
    return np.full(4, 0.0 * float(row.mean()), dtype=np.float32)


def warm(out: Path) -> list[tuple]:
    from lerobot_hydra.app.evaluation import evaluate_config
    from lerobot_hydra.app.probing import compose
    from lerobot_hydra.schemas.schema import validate

    cfg = compose(OVERRIDES)
    return _outcomes(evaluate_config(cfg, validate(cfg), out, "warm"))


@contextmanager
def _cold_run(cfg: Any, ev: Any, out: Path) -> Iterator[Any]:
    """A run context of its own: the parts, policy, workers and simulators built again."""
    from lerobot_hydra.run.context import open_run
    from lerobot_hydra.run.warm import Warm

    with Warm.opened(cfg) as kept, open_run(cfg, ev, out, "cold", kept) as run:
        yield run


def cold(out: Path) -> list[tuple]:
    """The rounds as they ran before: each one opens the run dir again, with a new policy, workers and simulators."""
    from dataclasses import asdict

    from lerobot_hydra.app.probing import compose
    from lerobot_hydra.results.sequential import TaskStops, one_policy_of, round_ends, successes_before
    from lerobot_hydra.run.execute import conclude
    from lerobot_hydra.run.sources import FixedPlan
    from lerobot_hydra.run.work import RoundCap, capped, outcomes_of, plan_work
    from lerobot_hydra.schemas.schema import validate

    cfg = compose(OVERRIDES)
    ev = validate(cfg)
    decided = TaskStops(asdict(ev.sequential), ev.n_episodes)
    keys: list[Any] = []

    def judge(end: int) -> bool:
        """Runs the round up to `end` in a run context of its own, then judges its tasks."""
        with _cold_run(cfg, ev, out) as run:
            keys[:] = [t.key for t in run.parts.tasks]
            run.run(capped(plan_work(run.parts.tasks, run.plan, run.sink), end, decided.stopped_after()))

            def decide(key: Any) -> Any:
                return one_policy_of(ev.sequential, successes_before(outcomes_of(run.sink, key), end))

            stopped = decided.judge_round(keys, end, decide, lambda line: None)
            run.end(False, False, decided.stopped_after())
        return stopped

    for _ in round_ends(ev.n_episodes, ev.sequential.round, judge):
        pass  # each round runs in `judge`
    with _cold_run(cfg, ev, out) as run:
        cap = RoundCap(ev.n_episodes, decided.stopped_after(), decided.summary(keys), final=True)
        return _outcomes(conclude(run, FixedPlan(run.plan, run.parts.tasks, cap)))


def _outcomes(results: Any) -> list[tuple]:
    return sorted((r.unit, r.seed, r.success, r.steps, round(r.sum_reward, 6)) for r in results.episodes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    records: dict[str, list[tuple]] = {}
    for _ in range(args.repeats):
        for name, side in (("cold", cold), ("warm", warm)):
            with tempfile.TemporaryDirectory() as out:
                began = time.perf_counter()
                records[name] = side(Path(out) / "run")
                times[name].append(time.perf_counter() - began)
            print(f"{name}: {times[name][-1]:.1f} s", flush=True)
    if records["cold"] != records["warm"]:
        print("FAIL  the warm and cold rounds recorded different episodes", flush=True)
        return 1
    best = {name: min(ts) for name, ts in times.items()}
    ratio = best["cold"] / best["warm"]
    ok = ratio >= TARGET
    print(
        f"{'PASS' if ok else 'FAIL'}  warm rounds: {ratio:.2f}x the cold rounds (target >= {TARGET}x)  "
        f"cold {best['cold']:.1f} s, warm {best['warm']:.1f} s, best of {args.repeats}; {len(records['warm'])} "
        "identical episodes",
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
