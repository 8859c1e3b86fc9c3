"""Every value a user can set is checked before anything is built; every mistake is one line naming the setting;
a setting that cannot take effect is refused; no results file holds NaN."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from lerobot_hydra.app.evaluation import evaluate_config
from lerobot_hydra.core.durable import write_json_atomic
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.gym import GymEnvConfig
from lerobot_hydra.results.aggregate import aggregate
from lerobot_hydra.results.eval_info import to_eval_info
from lerobot_hydra.results.table import format_table
from lerobot_hydra.schemas.schema import instantiate_node, validate
from tests.conftest import read_json, run_eval, run_here

DEFAULT_POLICY_LINE = "policy=metaworld_expert (the default policy) works only with env=metaworld"


BAD_SETTINGS = [
    (["seed=-1"], "seed must be 0 or more, got -1"),
    (["env=gym", "policy=random", "+env.gym_kwargs.foo=1"], "env.gym_kwargs {'foo': 1}: CartPole-v1 cannot be"),
    (["env=gym", "env.gym_id=CartPole-v1"], DEFAULT_POLICY_LINE),
    (["env=pusht"], DEFAULT_POLICY_LINE),
    (["env=libero"], DEFAULT_POLICY_LINE),
    (["env=libero", "policy=random", "env.task_ids=[]"], "env.task_ids is empty"),
    # OmegaConf reads nan and inf as floats, which no JSON file of the run can hold.
    (["env=gym", "policy=random", "+env.gym_kwargs.mode=nan"], "env.gym_kwargs.mode=nan is not a finite number"),
    (
        ["env.task=reach-v3", "eval.n_episodes=2", "eval.shard_id=2", "eval.num_shards=3"],
        "eval.num_shards=3 exceeds the 2 episodes of this run",
    ),
]


# The command line for one of them (eval.py prints every UserError of a run the same way), the others in process.
@pytest.mark.parametrize(("args", "expected"), BAD_SETTINGS[:1])
def test_bad_settings_exit_2_with_one_line_naming_the_setting(tmp_path: Path, args: list[str], expected: str) -> None:
    proc = run_eval(*args, out_dir=tmp_path / "out", check=False, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists()  # the dir Hydra made for the refused run (its empty log) is gone


def test_a_sweep_with_more_shards_than_episodes_is_one_line_and_leaves_no_dir(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_eval(
        "env.task=reach-v3", "eval.n_episodes=2", "eval.shard_id=0,1,2",
        out_dir=sweep, multirun=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()  # no Hydra "Error executing job with overrides" line before ours
    assert line.startswith("error: eval.num_shards=3 exceeds the 2 episodes of this run"), line
    assert not sweep.exists()


@pytest.mark.parametrize(("args", "expected"), BAD_SETTINGS[1:])
def test_bad_settings_are_refused_in_one_line_naming_the_setting(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    with pytest.raises(UserError) as refused:
        run_here(*args, out_dir=tmp_path / "out")
    line = str(refused.value)
    assert "\n" not in line and expected in line, line
    assert not (tmp_path / "out" / "episodes.jsonl").exists() and not (tmp_path / "out" / "eval_info.json").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["seed=-1"], "seed must be 0 or more"),
        # Episode seeds run to seed + n_episodes - 1; simulators take numpy's 32-bit seeds.
        (["seed=4294967290", "eval.n_episodes=10"], r"seed=4294967290 with eval.n_episodes=10 .* up to 4294967299"),
        (["env=libero", "policy=random", "seed=4294967296"], "past the simulators' limit of 4294967295"),
        (["env=gym", "policy=random", "env.episode_length=-5"], "env.episode_length must be at least 1"),
        (["env=gym", "policy=random", "env.episode_length=0"], "env.episode_length must be at least 1"),
        (["env.observation_height=0"], "env.observation_height must be at least 1"),
        (["env=libero", "policy=random", "env.observation_width=0"], "env.observation_width must be at least 1"),
        (["env=pusht", "policy=random", "env.fps=0"], "env.fps must be at least 1"),
        # A device absent on this machine is refused, also for policies that compute on the CPU anyway.
        (["device=cuda:99"], "device is cuda:99 but"),
        (["policy=random", "device=cuda:99"], "device is cuda:99 but"),
        (["policy=act", "policy.device=cuda:99"], "policy.device is cuda:99 but"),
        (["eval.step_timeout_s=0"], r"^eval.step_timeout_s must be positive, got 0.0$"),
        (["eval.worker_retries=-1"], r"^eval.worker_retries must be 0 or more, got -1$"),
        (["eval.on_error=skip"], r"^eval.on_error must be record or stop, got 'skip'$"),
        (
            ["eval.step_timeout_s=inf"],
            r"^eval.step_timeout_s=inf is not a finite number, .*'eval.step_timeout_s=\"inf\"'$",
        ),
        (["env=gym", "policy=random", "+env.gym_kwargs.bounds=[0,-inf]"], r"^env.gym_kwargs.bounds\[1\]=-inf is not"),
        (["policy=random", "+policy.scale=NaN"], r"^policy.scale=nan is not a finite number"),
    ],
)
def test_out_of_range_settings_are_refused_before_anything_is_built(
    compose: Any, overrides: list[str], message: str
) -> None:
    with pytest.raises(UserError, match=message):
        validate(compose(*overrides))


def test_upper_bound_seed_is_accepted(compose: Any) -> None:
    validate(compose("seed=4294967286", "eval.n_episodes=10"))


def test_gym_kwargs_the_env_does_not_take_name_the_setting() -> None:
    with pytest.raises(UserError, match=r"^env.gym_kwargs \{'foo': 1\}: CartPole-v1 cannot be made with them \("):
        GymEnvConfig(gym_id="CartPole-v1", gym_kwargs={"foo": 1}).tasks()


def test_a_package_that_does_not_import_is_refused_even_when_the_id_is_registered() -> None:
    with pytest.raises(UserError, match="needs the package 'no_such_module_xyz'"):
        GymEnvConfig(gym_id="CartPole-v1", package="no_such_module_xyz").tasks()


def test_an_extra_without_a_package_is_refused() -> None:
    with pytest.raises(UserError, match="env.extra names the project extra that installs env.package"):
        GymEnvConfig(gym_id="CartPole-v1", extra="pusht")


def test_gym_episode_length_is_the_step_limit_and_null_the_envs_own() -> None:
    assert GymEnvConfig(gym_id="CartPole-v1", episode_length=7).tasks()[0].max_steps == 7
    assert GymEnvConfig(gym_id="CartPole-v1").tasks()[0].max_steps == 500


def test_a_gym_env_runs_with_the_random_policy(tmp_path: Path) -> None:
    run_here("env=gym", "env.gym_id=CartPole-v1", "policy=random", "eval.n_episodes=2", out_dir=tmp_path)
    info = read_json(tmp_path / "eval_info.json")
    assert info["overall"]["n_episodes"] == 2 and info["per_task"][0]["task_name"] == "CartPole-v1"


def test_empty_libero_task_ids_are_an_error(compose: Any) -> None:
    cfg = compose("env=libero", "policy=random", "env.task_ids=[]")
    validate(cfg)
    with pytest.raises(UserError, match=r"env.task_ids is empty; give task indices such as \[0,3\]"):
        instantiate_node(cfg.env)


def test_a_shard_without_work_is_refused_before_anything_is_written(compose: Any, tmp_path: Path) -> None:
    cfg = compose("env.task=reach-v3", "eval.n_episodes=2", "eval.shard_id=2", "eval.num_shards=3")
    with pytest.raises(UserError, match=r"eval.num_shards=3 exceeds the 2 episodes .*eval.num_shards <= 2"):
        evaluate_config(cfg, validate(cfg), tmp_path / "out", "")
    assert not (tmp_path / "out").exists()


def test_results_without_episodes_hold_null_not_nan() -> None:
    results = aggregate([], 0.0)
    text = json.dumps(to_eval_info(results), allow_nan=False)
    overall = json.loads(text)["overall"]
    assert overall["pc_success"] is None and overall["avg_sum_reward"] is None and overall["eval_ep_s"] is None
    assert "overall" in format_table(results)


def test_results_writers_refuse_nan_and_infinity(tmp_path: Path) -> None:
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="not JSON compliant"):
            write_json_atomic(tmp_path / "eval_info.json", {"pc_success": value})
    assert not (tmp_path / "eval_info.json").exists()


@pytest.mark.parametrize(
    "overrides",
    [
        ["+env.features_map.pixles=observation.image"],
        ["env=libero", "policy=random", "+env.features_map.agentveiw=observation.images.top"],
        ["env=gym", "policy=random", "+env.features_map.nosuch=observation.x"],
    ],
)
def test_a_features_map_key_the_env_never_produces_is_refused(compose: Any, overrides: list[str]) -> None:
    key = overrides[-1].split("=")[0].rsplit(".", 1)[1]
    with pytest.raises(UserError, match=rf"env.features_map.{key}: the env has no raw observation '{key}'"):
        env_cfg = instantiate_node(compose(*overrides).env)
        env_cfg.tasks()


def test_gym_features_map_keys_follow_the_ids_observation(compose: Any) -> None:
    env_cfg = instantiate_node(compose("env=gym", "policy=random").env)
    assert "observation" in env_cfg.raw_observation_keys()
    env_cfg.tasks()  # the generic default keys are accepted for an id that has none of them
