"""The LeRobot policy path vs a bare loop running the same policy, on the same episodes and seeds.

    python -m speed.lerobot_path

A tiny ACT checkpoint (built offline by devkit/lerobot_checkpoints.py) on MetaWorld state observations:
`python eval.py policy=act policy.path=<it>` against the loop one would write with LeRobot's own API (its
processors around `policy.select_action`, one env per task, episodes one after the other). Both sides run as
fresh processes, one torch thread each, and must report the same total reward to 4 decimals. Ratio = the bare
loop's episode time / the sum of eval.py's episodes' `wall_s` (reset to record; imports and simulator creation,
which swing by seconds on a busy machine, are printed but not in the ratio), each side's best of `ROUNDS` runs,
alternately (single runs on the 2-core VM swing by 30%); target >= 0.95.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from speed.harness.timing import ENV, timed_eval, timed_python, verdict

TASKS = ["reach-v3", "push-v3"]
EPISODES = 5
STEPS = 200
ROUNDS = 3

BARE = """
import json, time, warnings
warnings.simplefilter("ignore")
import torch
torch.set_num_threads(1)
from lerobot.policies.factory import get_policy_class, make_pre_post_processors
from lerobot.configs.policies import PreTrainedConfig
from lerobot_hydra.envs.metaworld import _make_task_env
path = {path!r}
config = PreTrainedConfig.from_pretrained(path)
policy = get_policy_class(config.type).from_pretrained(path, config=config).eval()
pre, post = make_pre_post_processors(config, pretrained_path=path)
total = rollout_s = 0.0
for name in {tasks!r}:
    env = _make_task_env(name)
    for k in range({episodes}):
        start = time.perf_counter()
        env.seed(1000 + k)
        raw, _ = env.reset()
        policy.reset()
        for _ in range({steps}):
            batch = {{
                "observation.state": torch.from_numpy(raw[None, :4]).float(),
                "observation.environment_state": torch.from_numpy(raw[None]).float(),
            }}
            with torch.inference_mode():
                action = post(policy.select_action(pre(batch)))
            raw, reward, _, truncated, info = env.step(action[0].numpy())
            total += float(reward)
            if info["success"] or truncated:
                break
        rollout_s += time.perf_counter() - start
    env.close()
print(json.dumps([total, rollout_s]))
"""


def main() -> int:
    from devkit.lerobot_checkpoints import tiny_act

    ENV.update(OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")  # both sides: one torch thread, no spinning
    with tempfile.TemporaryDirectory() as tmp:
        path = str(tiny_act(Path(tmp) / "act"))
        bare = BARE.format(path=path, tasks=TASKS, episodes=EPISODES, steps=STEPS)
        overrides = (
            "policy=act",
            f"policy.path={path}",
            "device=cpu",
            f"env.task=[{','.join(TASKS)}]",
            "env.obs_type=state",
            f"env.episode_length={STEPS}",
            f"eval.n_episodes={EPISODES}",
            "eval.batch_size=1",
            "eval.use_async_envs=false",
        )
        bares, ours = [], []
        for _ in range(ROUNDS):
            bares.append(timed_python(bare))
            ours.append(timed_eval(*overrides))
    bare_s, (bare_reward, bare_rollout_s) = min(bares, key=lambda run: run[1][1])
    ours_s, info = min(ours, key=lambda run: sum(e["wall_s"] for e in run[1]["episodes"]))
    ours_reward = sum(sum(t["metrics"]["sum_rewards"]) for t in info["per_task"])
    ours_rollout_s = sum(e["wall_s"] for e in info["episodes"])
    ok = verdict(
        f"tiny ACT, MetaWorld state, {len(TASKS)} tasks x {EPISODES} episodes x {STEPS} steps, episodes' wall time, "
        f"best of {ROUNDS}",
        bare_rollout_s / ours_rollout_s,
        0.95,
        f"bare {bare_rollout_s:.1f} s vs eval.py {ours_rollout_s:.1f} s; total reward {bare_reward:.4f} vs "
        f"{ours_reward:.4f}; whole processes (imports, simulators, outputs) {bare_s:.1f} s vs {ours_s:.1f} s",
    )
    return 0 if ok and round(bare_reward, 4) == round(ours_reward, 4) else 1


if __name__ == "__main__":
    sys.exit(main())
