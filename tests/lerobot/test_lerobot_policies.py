"""LeRobot checkpoints through the real loader: tiny ACT, diffusion and SmolVLA policies built offline with
LeRobot's own classes and saved with their processors, evaluated on real MetaWorld and PushT simulators through
eval.py (and once through the installed lerobot-eval, which must agree episode by episode)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devkit.lerobot_checkpoints import PUSHT_ACTION, PUSHT_PIXELS, tiny_act, tiny_diffusion, tiny_smolvla
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.schemas.schema import instantiate_node
from tests.conftest import outcome, read_episodes, run_eval, run_here
from tests.helpers.lerobot_cli import run_lerobot_eval

pytest.importorskip("lerobot")
LEROBOT_06 = tuple(int(p) for p in importlib.metadata.version("lerobot").split(".")[:2]) >= (0, 6)
pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_torch_thread")]

TASKS = ["reach-v3", "push-v3", "drawer-open-v3"]
STEPS = 25
# State observations only and in-process envs: nothing is rendered and no worker starts, so runs stay short.
METAWORLD = [f"env.task=[{','.join(TASKS)}]", "env.obs_type=state", f"env.episode_length={STEPS}"]
EPISODES = ["eval.n_episodes=3", "eval.batch_size=2", "eval.use_async_envs=false"]


# One torch thread: these policies are tiny, and on a busy CPU idle OpenMP threads slow each op down 100x.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {
        "act": tiny_act(root / "act"),
        "diffusion": tiny_diffusion(root / "diffusion"),
        "act_pusht": tiny_act(root / "act_pusht", PUSHT_PIXELS, PUSHT_ACTION),
        "smolvla": tiny_smolvla(root / "smolvla"),  # on a tiny local VLM: no Hub
    }


def outcomes(run_dir: Path) -> list[tuple]:
    return sorted(outcome(r) for r in read_episodes(run_dir))


def assert_every_episode_recorded(run_dir: Path, tasks: list[str], episodes: int, max_steps: int) -> None:
    records = read_episodes(run_dir)
    assert sorted((r["task_name"], r["episode_index"]) for r in records) == sorted(
        (t, k) for t in tasks for k in range(episodes)
    )
    for r in records:
        assert 1 <= r["steps"] <= max_steps
        assert r["success"] or r["steps"] == max_steps  # an episode ends early only by succeeding


@pytest.mark.parametrize("name", ["smolvla", "pi0", "pi05", "act", "diffusion"])
def test_policy_yamls_compose_to_the_loader_with_the_top_level_device(compose: Callable, name: str) -> None:
    from lerobot_hydra.schemas.schema import validate

    cfg = compose(f"policy={name}", "device=cpu")
    validate(cfg)
    policy = instantiate_node(cfg.policy)
    assert type(policy).__name__ == "LeRobotPolicyConfig"
    assert policy.device == "cpu" and "/" in policy.path


def test_a_run_is_planned_without_importing_lerobots_policy_modules(checkpoints: dict[str, Path]) -> None:
    # Importing LeRobot's policy modules takes seconds; the env workers start only after the run is planned
    # (`build_run`) and build their first simulators while the policy loads, so planning must not import them
    # (speed/vs_libero_loop.py). The second line shows the check would see them.
    code = (
        "import sys\n"
        "from lerobot_hydra.app.autotune import compose\n"
        "from lerobot_hydra.rollout.build import build_run\n"
        f"parts = build_run(compose(['env=pusht', 'policy=act', 'policy.path={checkpoints['act_pusht']}']))\n"
        "loaded = lambda: sorted(m for m in sys.modules if m.startswith('lerobot.policies'))\n"
        "print(parts.policy.family(), len(loaded()))\n"
        "parts.policy.lerobot_config()\n"
        "print(len(loaded()) > 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-3:] == ["act", "0", "True"]


def test_smolvla_with_the_hub_unreachable_fails_with_one_line(tmp_path: Path) -> None:
    # A subprocess: huggingface_hub reads HF_HUB_OFFLINE and HF_HOME when it is imported.
    proc = run_eval(
        "policy=smolvla",
        "env.task=reach-v3",
        "eval.n_episodes=1",
        out_dir=tmp_path / "run",
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")},  # an empty cache
        check=False,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    assert "'lerobot/smolvla_libero'" in lines[0] and "HF_HUB_OFFLINE=1" in lines[0]
    assert "policy.path" in lines[0] and "local directory" in lines[0]


@pytest.mark.slow
def test_act_parallel_tasks_give_the_same_records_as_serial(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    policy = ["policy=act", f"policy.path={checkpoints['act']}"]
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    run_here(*policy, *METAWORLD, *EPISODES, "eval.max_parallel_tasks=1", out_dir=serial, env=ONE_THREAD)
    run_here(*policy, *METAWORLD, *EPISODES, "eval.max_parallel_tasks=3", out_dir=parallel, env=ONE_THREAD)
    assert_every_episode_recorded(serial, TASKS, 3, STEPS)
    assert outcomes(serial) == outcomes(parallel)
    # The policy acted: rewards depend on the episode, not a constant no-op.
    assert len({round(r["sum_reward"], 6) for r in read_episodes(serial)}) > 3


@pytest.mark.slow
def test_diffusion_is_reproducible_across_runs_and_lanes(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    policy = ["policy=diffusion", f"policy.path={checkpoints['diffusion']}", *METAWORLD, "eval.use_async_envs=false"]
    episodes = ["eval.n_episodes=2", "eval.batch_size=2"]
    run_here(*policy, *episodes, "eval.max_parallel_tasks=3", out_dir=tmp_path / "a", env=ONE_THREAD)
    run_here(*policy, *episodes, "eval.max_parallel_tasks=1", out_dir=tmp_path / "b", env=ONE_THREAD)
    assert_every_episode_recorded(tmp_path / "a", TASKS, 2, STEPS)
    assert outcomes(tmp_path / "a") == outcomes(tmp_path / "b")


@pytest.mark.slow
def test_act_on_pusht_matches_lerobot_eval_episode_by_episode(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """The same checkpoint, seeds and episodes through LeRobot's own CLI give the same rewards, episode by episode."""
    steps, episodes, checkpoint = 40, 4, checkpoints["act_pusht"]
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    common = [f"eval.n_episodes={episodes}", "eval.batch_size=2"]
    run_here(
        "env=pusht",
        "policy=act",
        f"policy.path={checkpoint}",
        f"env.episode_length={steps}",
        *common,
        out_dir=ours,
        env=ONE_THREAD,
    )
    their_rewards = run_lerobot_eval(
        f"--policy.path={checkpoint}",
        "--policy.device=cpu",
        "--env.type=pusht",
        f"--env.episode_length={steps}",
        *(f"--{c}" for c in common),
        "--eval.use_async_envs=false",  # 0.6's default async workers do not import gym_pusht's registration
        "--seed=1000",
        output_dir=theirs,
        env=ONE_THREAD,
    )
    records = sorted(read_episodes(ours), key=lambda r: r["episode_index"])
    assert_every_episode_recorded(ours, ["PushT-v0"], episodes, steps)
    assert [r["sum_reward"] for r in records] == pytest.approx(their_rewards, rel=1e-9, abs=1e-9)
    if LEROBOT_06:  # env=lerobot needs LeRobot 0.6 (on 0.4.4 it is refused in one line)
        # The same through the LeRobot env adapter: LeRobot's pusht type in our worker processes.
        adapter = tmp_path / "adapter"
        run_here(
            "env=lerobot",
            "env.type=pusht",
            f"env.episode_length={steps}",
            "policy=act",
            f"policy.path={checkpoint}",
            *common,
            out_dir=adapter,
            env=ONE_THREAD,
        )
        assert_every_episode_recorded(adapter, ["PushT-v0"], episodes, steps)
        assert outcomes(adapter) == outcomes(ours)
    # The actions mattered: in some episode the agent moved the block (its reward was not constant).
    assert any(r["sum_reward"] < r["max_reward"] * r["steps"] - 1e-6 for r in records)


@pytest.mark.slow
def test_smolvla_on_pusht_end_to_end_offline(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    overrides = ["env=pusht", "policy=smolvla", f"policy.path={checkpoints['smolvla']}", "env.episode_length=12"]
    run_here(*overrides, "eval.n_episodes=2", "eval.batch_size=2", "eval.use_async_envs=false", out_dir=tmp_path)
    assert_every_episode_recorded(tmp_path, ["PushT-v0"], 2, 12)


def build(compose: Callable, *overrides: str) -> tuple[Any, Any]:
    """(env config, loaded policy) in this process."""
    cfg = compose(*overrides, "device=cpu")
    env = instantiate_node(cfg.env)
    return env, instantiate_node(cfg.policy).build(env, "cpu")


def first_batch(env: Any, task_index: int = 0) -> dict[str, Any]:
    """The env's pre-processed batch for one real reset of its first task."""
    from lerobot_hydra.processors.observation import RAW_KEY

    task = env.tasks()[task_index]
    sim = env.build(task, render=False)
    try:
        obs, _ = sim.reset(seed=1000)
    finally:
        sim.close()
    batched = {k: np.asarray(v)[None] for k, v in obs.items()}
    pre, _ = env.build_processors()
    return pre({RAW_KEY: batched, "task": [task.description]})


def test_actions_come_unnormalized_in_the_env_range(compose: Callable, checkpoints: dict[str, Path]) -> None:
    env, policy = build(compose, "env=pusht", "policy=act", f"policy.path={checkpoints['act_pusht']}")
    policy.reset(env.tasks()[0], [1000])
    action = np.asarray(policy.select_action(first_batch(env)))
    assert action.shape == (1, 2) and action.dtype == np.float32
    _, action_space = env.spaces(env.tasks()[0])
    assert action_space.contains(action[0])
    # The checkpoint's actions have mean 256 and std 60: the postprocessor un-normalized the output (raw policy
    # outputs are within a few units of 0).
    assert np.all(np.abs(action - PUSHT_ACTION[1]) < 4 * PUSHT_ACTION[2])


def test_diffusion_noise_is_seeded_per_episode(compose: Callable, checkpoints: dict[str, Path]) -> None:
    env, policy = build(compose, "policy=diffusion", f"policy.path={checkpoints['diffusion']}", "env.obs_type=state")
    task, batch = env.tasks()[0], first_batch(env)
    actions = {}
    for name, seeds in (("a", [1000]), ("again", [1000]), ("other", [1001])):
        policy.reset(task, seeds)
        actions[name] = np.asarray(policy.select_action(batch))
    assert np.array_equal(actions["a"], actions["again"])
    assert not np.allclose(actions["a"], actions["other"])  # it does sample: the seed is what makes runs repeat


def test_smolvla_tokenizer_gets_one_task_string_per_sample(compose: Callable, checkpoints: dict[str, Path]) -> None:
    env, policy = build(compose, "env=pusht", "policy=smolvla", f"policy.path={checkpoints['smolvla']}")
    task = env.tasks()[0]
    batch = {k: np.concatenate([v, v]) for k, v in first_batch(env).items() if k.startswith("observation.")}
    text = task.description
    actions = []
    for given in ([text, text], text, (text, text), np.array([text, text])):
        policy.reset(task, [1000, 1001])
        actions.append(np.asarray(policy.select_action({**batch, "task": given})))
    assert actions[0].shape == (2, 2)
    assert all(np.array_equal(actions[0], other) for other in actions[1:])
    policy.reset(task, [1002, 1003])
    assert not np.allclose(actions[0], np.asarray(policy.select_action({**batch, "task": text})))  # flow noise


def test_forks_share_weight_tensors_but_not_episode_state(compose: Callable, checkpoints: dict[str, Path]) -> None:
    env, policy = build(
        compose,
        "policy=act",
        f"policy.path={checkpoints['act']}",
        "env.obs_type=state",
        "env.task=reach-v3",
        "policy.overrides={temporal_ensemble_coeff: 0.01, n_action_steps: 1}",
    )
    fork = policy.fork()
    for (name, a), (_, b) in zip(policy.policy.state_dict().items(), fork.policy.state_dict().items(), strict=True):
        assert a.data_ptr() == b.data_ptr(), name
    assert fork.policy is not policy.policy
    assert fork.policy.temporal_ensembler is not policy.policy.temporal_ensembler
    assert fork.preprocessor is not policy.preprocessor
    task, batch = env.tasks()[0], first_batch(env)
    policy.reset(task, [1000])
    fork.reset(task, [1000])
    assert np.array_equal(policy.select_action(batch), fork.select_action(batch))
    for _ in range(3):
        fork.select_action(batch)  # advances only the fork's ensemble
    second = policy.select_action(batch)
    fresh = policy.fork()
    fresh.reset(task, [1000])
    fresh.select_action(batch)
    assert np.array_equal(second, fresh.select_action(batch))  # the original saw none of the fork's steps


def test_act_with_temporal_ensembling_is_correct_in_parallel(compose: Callable, checkpoints: dict[str, Path]) -> None:
    """ACT's temporal ensemble is per-episode state inside the model object: each lane has its own."""
    from lerobot_hydra.rollout.lanes import LaneSettings, evaluate
    from lerobot_hydra.rollout.progress import Progress
    from lerobot_hydra.rollout.runner import TaskWork

    env, policy = build(
        compose,
        "policy=act",
        f"policy.path={checkpoints['act']}",
        "policy.overrides={temporal_ensemble_coeff: 0.01, n_action_steps: 1}",
        *METAWORLD,
    )
    pre, post = env.build_processors()
    runs = []
    for lanes in (1, 3):
        records: list[Any] = []
        work = [TaskWork(task, [0, 1]) for task in env.tasks()]
        evaluate(
            LaneSettings(env, pre, post, 1000, 2, False, lanes),
            work,
            lambda: policy,
            on_record=records.append,
            progress=Progress(60.0),
        )
        runs.append(sorted(outcome(dataclasses.asdict(r)) for r in records))
    assert len(runs[0]) == 2 * len(TASKS)
    assert runs[0] == runs[1]


def test_task_strings_reach_the_preprocessor_as_a_list(compose: Callable, checkpoints: dict[str, Path]) -> None:
    env, policy = build(compose, "policy=act", f"policy.path={checkpoints['act']}", "env.obs_type=state")
    batch = first_batch(env)
    seen: list[Any] = []
    original = policy.preprocessor
    policy.preprocessor = lambda b: seen.append(b["task"]) or original(b)
    policy.reset(env.tasks()[0], [1000])
    for task in ("Reach a goal position", ("Reach a goal position",), np.array(["Reach a goal position"])):
        policy.select_action({**batch, "task": task})
    assert seen == [["Reach a goal position"]] * 3
    # Env keys the policy does not read are dropped before its preprocessor.
    assert "observation.unused" not in policy._policy_batch({**batch, "observation.unused": batch["observation.state"]})


def test_a_missing_policy_input_is_one_line_naming_it_and_the_fix(
    compose: Callable, tmp_path_factory: pytest.TempPathFactory
) -> None:
    features = {"observation.robot_state": ("STATE", (4,)), "observation.environment_state": ("ENV", (39,))}
    directory = tiny_act(tmp_path_factory.mktemp("renamed") / "act", features)
    overrides = ["policy=act", f"policy.path={directory}", "env.obs_type=state", "env.task=reach-v3"]
    with pytest.raises(UserError) as err:
        build(compose, *overrides)
    message = str(err.value)
    assert "\n" not in message
    assert "observation.robot_state (4,)" in message
    assert "fix it with policy.rename_map={observation.state: observation.robot_state}" in message
    # The suggested map works.
    build(compose, *overrides, "policy.rename_map={observation.state: observation.robot_state}")


def test_a_camera_the_env_lacks_is_named_and_can_be_left_blank(
    compose: Callable, tmp_path_factory: pytest.TempPathFactory
) -> None:
    features = {**PUSHT_PIXELS, "observation.images.wrist": ("VISUAL", (3, 96, 96))}
    directory = tiny_smolvla(tmp_path_factory.mktemp("two_cameras"), features)
    overrides = ["env=pusht", "policy=smolvla", f"policy.path={directory}"]
    with pytest.raises(UserError, match=r"fix it with policy.blank_cameras=\[observation.images.wrist\]"):
        build(compose, *overrides)
    with pytest.raises(UserError, match=r"add policy.overrides=\{empty_cameras: 1\}"):
        build(compose, *overrides, "policy.blank_cameras=[observation.images.wrist]")
    env, policy = build(
        compose, *overrides, "policy.blank_cameras=[observation.images.wrist]", "policy.overrides={empty_cameras: 1}"
    )
    policy.reset(env.tasks()[0], [1000])
    assert np.asarray(policy.select_action(first_batch(env))).shape == (1, 2)


def test_wrong_action_size_and_unknown_override_are_one_line(compose: Callable, checkpoints: dict[str, Path]) -> None:
    with pytest.raises(UserError, match=r"outputs actions of shape \(2,\) but the env's action space is \(4,\)"):
        build(compose, "policy=act", f"policy.path={checkpoints['act_pusht']}", "env.task=reach-v3")
    with pytest.raises(
        UserError, match=r"policy.overrides.n_action_step is not a field.*did you mean 'n_action_steps'"
    ):
        build(compose, "policy=act", f"policy.path={checkpoints['act']}", "policy.overrides={n_action_step: 2}")


def test_pickled_weights_and_foreign_processor_steps_are_refused(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    from lerobot_hydra.policies.lerobot.checkpoint import Checkpoint, check_processor_steps, resolve_checkpoint

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((checkpoints["act"] / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(UserError, match=r"has no model.safetensors \(it has pytorch_model.bin\).*never unpickled"):
        resolve_checkpoint(str(pickled))

    hostile = tmp_path / "hostile"
    hostile.mkdir()
    steps = {"steps": [{"class": "subprocess.Popen", "config": {"args": ["true"]}}]}
    (hostile / "policy_preprocessor.json").write_text(json.dumps(steps))
    with pytest.raises(UserError, match="'subprocess.Popen', which is not a LeRobot processor step"):
        check_processor_steps(Checkpoint(hostile, "someone/hostile"), "policy_preprocessor.json")


def test_no_hub_access_at_import_time() -> None:
    heavy = "{'lerobot', 'huggingface_hub', 'torch'}"
    code = f"import lerobot_hydra.policies.lerobot.config, sys; print(sorted({heavy} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=os.environ)
    assert out.stdout.strip() == "[]"  # LeRobot, the Hub client and torch load only when a policy is built
