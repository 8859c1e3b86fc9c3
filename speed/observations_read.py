"""Observations only when read: `policy=random` on MetaWorld with the default observations (480x480 pixels and
the state) vs the same run with `env.obs_type=state`.

    python -m speed.observations_read

Random reads no observation, so the env renders nothing whatever `env.obs_type` says: the default run must be
as fast as the state-only one (target >= 0.9x; 2 tasks x 4 episodes of up to 500 steps, batch 2; each side best
of 3 fresh `eval.py` processes, start to exit, run alternately). Both must give the same episodes. For
reference, a shorter run (2 episodes of 20 steps) with `env.compute_all_observations=true` shows what the default
cost when every observation was computed (no target).
"""

from __future__ import annotations

import sys

from speed.harness.timing import timed_eval, verdict

RUN = ("env.task=[reach-v3,push-v3]", "policy=random", "eval.n_episodes=4", "eval.batch_size=2")
SHORT = ("env.task=[reach-v3]", "policy=random", "eval.n_episodes=2", "env.episode_length=20", "eval.batch_size=2")
ROUNDS = 3


def outcomes(info: dict) -> list[tuple]:
    return sorted(
        (e["task_group"], e["episode_index"], e["success"], round(e["sum_reward"], 6), e["steps"])
        for e in info["episodes"]
    )


def main() -> int:
    times: dict[str, list[float]] = {"state": [], "default": []}
    infos: dict[str, dict] = {}
    for _ in range(ROUNDS):
        for side, extra in (("state", ("env.obs_type=state",)), ("default", ())):
            elapsed, infos[side] = timed_eval(*RUN, *extra)
            times[side].append(elapsed)
    state_s, default_s = min(times["state"]), min(times["default"])
    same = outcomes(infos["state"]) == outcomes(infos["default"])
    ok = verdict(
        "policy=random, default observations vs env.obs_type=state",
        state_s / default_s,
        0.9,
        f"(state {state_s:.1f} s, default {default_s:.1f} s; {'identical' if same else 'DIFFERENT'} episodes)",
    )
    short_s, short_info = timed_eval(*SHORT)
    everything_s, everything_info = timed_eval(*SHORT, "env.compute_all_observations=true")
    same_short = outcomes(short_info) == outcomes(everything_info)
    print(
        f"info  2 episodes of 20 steps: default {short_s:.1f} s, env.compute_all_observations=true (every step "
        f"rendered at 480x480) {everything_s:.1f} s; {'identical' if same_short else 'DIFFERENT'} episodes"
    )
    return 0 if ok and same and same_short else 1


if __name__ == "__main__":
    sys.exit(main())
