"""MetaWorld end to end through eval.py: real simulators, real scripted experts."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig
from lerobot_hydra.policies.metaworld_expert import expert_for
from tests.conftest import outcome, read_episodes, read_json, run_eval, run_here

# One task from each difficulty group.
TASKS = ["reach-v3", "drawer-open-v3", "basketball-v3", "pick-place-v3", "shelf-place-v3"]
EPISODES = 6


def direct_expert_successes(task: str, seeds: list[int]) -> list[bool]:
    """MetaWorld's own env and scripted policy, stepped by hand, no lerobot_hydra rollout code involved."""
    import metaworld

    benchmark = metaworld.MT1(task, seed=0)
    env = benchmark.train_classes[task]()
    env.set_task(benchmark.train_tasks[0])
    env._freeze_rand_vec = False
    env.seeded_rand_vec = True
    policy = expert_for(task)
    out = []
    for seed in seeds:
        env.seed(seed)
        obs, _ = env.reset()
        success = False
        for _ in range(env.max_path_length):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                obs, _, _, truncated, info = env.step(policy.get_action(obs))
            success = bool(info["success"])
            if success or truncated:
                break
        out.append(success)
    env.close()
    return out


@pytest.fixture(scope="module")
def expert_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("expert")
    run_here(f"env.task=[{','.join(TASKS)}]", f"eval.n_episodes={EPISODES}", "eval.batch_size=3", out_dir=out)
    return out


def test_expert_succeeds_across_difficulty_groups_like_metaworld_itself(expert_run: Path) -> None:
    info = read_json(expert_run / "eval_info.json")
    ours = {t["task_name"]: t["metrics"]["successes"] for t in info["per_task"]}
    assert list(ours) == TASKS
    for task in TASKS:
        reference = direct_expert_successes(task, [1000 + k for k in range(EPISODES)])
        assert abs(sum(ours[task]) - sum(reference)) <= 1, (task, ours[task], reference)
    assert info["overall"]["pc_success"] >= 80.0


def test_random_policy_is_far_below_the_expert(expert_run: Path, tmp_path: Path) -> None:
    run_here(
        f"env.task=[{','.join(TASKS)}]",
        "policy=random",
        "env.obs_type=state",
        "eval.n_episodes=3",
        "env.episode_length=60",
        "eval.batch_size=3",
        out_dir=tmp_path,
    )
    random_pc = read_json(tmp_path / "eval_info.json")["overall"]["pc_success"]
    expert_pc = read_json(expert_run / "eval_info.json")["overall"]["pc_success"]
    assert random_pc <= expert_pc - 50.0


def test_results_do_not_depend_on_batch_size(tmp_path: Path) -> None:
    runs = {}
    for batch, use_async in ((1, "false"), (2, "true"), (5, "true")):
        out = tmp_path / f"b{batch}"
        run_here(
            "env.task=[reach-v3,push-v3]",
            "policy=random",
            "env.obs_type=state",
            "eval.n_episodes=5",
            "env.episode_length=40",
            f"eval.batch_size={batch}",
            f"eval.use_async_envs={use_async}",
            out_dir=out,
        )
        runs[batch] = sorted(outcome(r) for r in read_episodes(out))
    assert len(runs[1]) == 10
    assert runs[1] == runs[2] == runs[5]
    assert len({r[3] for r in runs[1]}) == 5  # seeds 1000..1004, shared by both tasks


def test_eval_info_has_lerobot_layout_and_episode_records(expert_run: Path) -> None:
    info = read_json(expert_run / "eval_info.json")
    assert set(info) >= {"per_task", "per_group", "overall"}
    for task in info["per_task"]:
        assert set(task) >= {"task_group", "task_id", "metrics"}
        assert set(task["metrics"]) >= {"sum_rewards", "max_rewards", "successes", "video_paths"}
        assert len(task["metrics"]["successes"]) == EPISODES
    for group in info["per_group"].values():
        assert set(group) >= {"avg_sum_reward", "avg_max_reward", "pc_success", "n_episodes"}
    assert set(info["overall"]) >= {
        "avg_sum_reward",
        "avg_max_reward",
        "pc_success",
        "n_episodes",
        "eval_s",
        "eval_ep_s",
    }
    episodes = read_episodes(expert_run)
    assert len(episodes) == len(TASKS) * EPISODES == info["overall"]["n_episodes"]
    assert set(episodes[0]) >= {
        "task_group",
        "task_id",
        "task",
        "episode_index",
        "seed",
        "success",
        "sum_reward",
        "max_reward",
        "steps",
        "wall_s",
    }


def test_episode_ends_at_first_success_and_counts_that_step(tmp_path: Path) -> None:
    run_here("env.task=reach-v3", "eval.n_episodes=2", "eval.batch_size=2", out_dir=tmp_path)
    for rec in read_episodes(tmp_path):
        assert rec["success"] and 0 < rec["steps"] < 500


def test_observation_keys_follow_lerobot_convention() -> None:
    from lerobot_hydra.processors.observation import RAW_KEY, LeRobotLayout, MapObservationKeys

    cfg = MetaWorldEnvConfig(task="reach-v3", obs_type="pixels_agent_pos", observation_height=64, observation_width=64)
    env = cfg.build(cfg.tasks()[0], render=False)
    obs, _ = env.reset(seed=0)
    env.close()
    batch = {RAW_KEY: {k: v[None] for k, v in obs.items()}, "task": ["Reach a goal position"]}
    features = {
        "agent_pos": "observation.state",
        "environment_state": "observation.environment_state",
        "pixels": "observation.image",
    }
    out = LeRobotLayout()(MapObservationKeys(features)(batch))
    assert tuple(out["observation.state"].shape) == (1, 4)
    assert tuple(out["observation.environment_state"].shape) == (1, 39)
    assert tuple(out["observation.image"].shape) == (1, 3, 64, 64)
    assert all(out[k].dtype == np.float32 for k in ("observation.image", "observation.state"))
    assert 0.0 <= float(out["observation.image"].min()) and float(out["observation.image"].max()) <= 1.0
    assert np.asarray(out["observation.image"]).std() > 0.01
    assert out["task"] == ["Reach a goal position"]


def test_default_command_runs_end_to_end(tmp_path: Path) -> None:
    # `python eval.py` with nothing else (the README's first command, so through the command line), shrunk to two
    # episodes per task to keep the suite quick.
    proc = run_eval("eval.n_episodes=2", out_dir=tmp_path, timeout=600, config_videos=True)
    info = read_json(tmp_path / "eval_info.json")
    assert info["overall"]["n_episodes"] == 100
    assert info["overall"]["pc_success"] >= 85.0
    assert "overall" in proc.stdout and "very_hard" in proc.stdout
    assert not (tmp_path / "videos").exists()  # the embedded default records no video (see metaworld_expert.yaml)
