"""Toolkit vs a bare Gymnasium loop on the same envs, policy, episodes and seeds.

    python -m speed.vs_bare_loop

MetaWorld: the embedded default, `python eval.py` exactly as a user runs it (MT50, scripted experts, state
observations, 10 episodes per task), against a hand-written loop over the same 500 episodes. PushT:
`python eval.py env=pusht policy=random` (pixels) against the same episodes by hand. The bare loop is what one
would write: one env per task, episodes one after the other, the policy called per step. Both sides run as
fresh processes (imports included) and must report the same successes. Ratio = bare wall time / eval.py wall
time (higher is better for the toolkit); target >= 0.95.
"""

from __future__ import annotations

import sys

from lerobot_hydra.envs.metaworld import expand_tasks
from speed.harness.timing import timed_eval, timed_python, verdict

METAWORLD_TASKS = [name for _, names in expand_tasks("all") for name in names]
METAWORLD_EPISODES = 10
PUSHT_EPISODES = 8
PUSHT_STEPS = 300

BARE_METAWORLD = """
import json, warnings
warnings.simplefilter("ignore")
from lerobot_hydra.envs.metaworld import _make_task_env, task_catalog
import metaworld.policies
tasks, episodes = {tasks!r}, {episodes}
successes = 0
for name in tasks:
    env = _make_task_env(name)
    policy = getattr(metaworld.policies, task_catalog()["expert_policies"][name])()
    for k in range(episodes):
        env.seed(1000 + k)
        obs, _ = env.reset()
        for _ in range(env.max_path_length):
            obs, _, _, truncated, info = env.step(policy.get_action(obs))
            if info["success"] or truncated:
                break
        successes += int(bool(info["success"]))
    env.close()
print(json.dumps(successes))
"""

BARE_PUSHT = """
import json
import gymnasium as gym
import gym_pusht
env = gym.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos", render_mode="rgb_array", max_episode_steps={steps})
successes = 0
for k in range({episodes}):
    obs, _ = env.reset(seed=1000 + k)
    env.action_space.seed(1000 + k + 7919)
    while True:
        obs, _, terminated, truncated, info = env.step(env.action_space.sample())
        if terminated or truncated:
            break
    successes += int(bool(info.get("is_success", False)))
env.close()
print(json.dumps(successes))
"""


def main() -> int:
    ok = True
    bare_s, bare_wins = timed_python(BARE_METAWORLD.format(tasks=METAWORLD_TASKS, episodes=METAWORLD_EPISODES))
    ours_s, info = timed_eval()
    ours_wins = sum(sum(t["metrics"]["successes"]) for t in info["per_task"])
    ok &= verdict(
        "MetaWorld MT50 x 10 (python eval.py), scripted experts",
        bare_s / ours_s,
        0.95,
        f"bare {bare_s:.1f} s vs eval.py {ours_s:.1f} s; successes {bare_wins} vs {ours_wins}",
    )
    bare_s, bare_wins = timed_python(BARE_PUSHT.format(steps=PUSHT_STEPS, episodes=PUSHT_EPISODES))
    ours_s, info = timed_eval(
        "env=pusht", "policy=random", f"eval.n_episodes={PUSHT_EPISODES}", f"env.episode_length={PUSHT_STEPS}"
    )
    ours_wins = sum(sum(t["metrics"]["successes"]) for t in info["per_task"])
    ok &= verdict(
        "PushT pixels, random policy",
        bare_s / ours_s,
        0.95,
        f"bare {bare_s:.1f} s vs eval.py {ours_s:.1f} s; successes {bare_wins} vs {ours_wins}",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
