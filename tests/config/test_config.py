"""The real config tree composes, and every bad input ends in one line and a non-zero exit."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.schemas.schema import validate
from tests.conftest import CONF, run_eval, run_here

GROUPS = ["env", "policy", "eval", "logger"]


def lerobot_06() -> bool:
    """Whether the installed LeRobot has the env types env=lerobot builds (0.6 and newer)."""
    from importlib.metadata import version

    return int(version("lerobot").split(".")[1]) >= 6


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_of_every_group_composes(compose, group: str) -> None:
    assert options(group), f"conf/{group} is empty"
    for option in options(group):
        cfg = compose(f"{group}={option}")
        OmegaConf.to_container(cfg, resolve=True)
        if group in ("env", "policy"):
            assert "_target_" in cfg[group]


def test_every_env_and_policy_validates(compose) -> None:
    for env in options("env"):
        cfg = compose(f"env={env}", "policy=random")
        if env == "lerobot" and not lerobot_06():
            with pytest.raises(UserError, match="env=lerobot needs LeRobot 0.6 or newer"):
                validate(cfg)
            continue
        validate(cfg)
    for policy in options("policy"):
        validate(compose(f"policy={policy}"))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.n_episodes=0", "eval.n_episodes must be at least 1"),
        ("eval.batch_size=-2", "eval.batch_size must be at least 1"),
        ("eval.shard_id=4 eval.num_shards=4", "out of range"),
        ("eval.shard_id=1", "needs eval.num_shards"),
        ("device=tpu", "device must be"),
    ],
)
def test_validation_rejects_bad_values(compose, override: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        validate(compose(*override.split()))


def test_unknown_keys_under_env_and_eval_are_rejected(compose) -> None:
    with pytest.raises(UserError, match=r"unknown key 'env.camera'.*did you mean 'camera_name'"):
        validate(compose("+env.camera=top"))
    with pytest.raises(UserError, match="unknown key 'eval.foo'"):
        validate(compose("+eval.foo=1"))


# (command line, what its one line says); the command line is run for one case of each way an error is printed
# (a Hydra composition error, a shard sweep refused before it launches, a UserError of the run), the others here.
BAD_COMMAND_LINES = [
    (["env=nope"], "unknown env 'nope'; available: gym, lerobot, libero, libero_lerobot, metaworld, pusht"),
    (["policy=smolvlaa"], "unknown policy 'smolvlaa'"),
    (["eval.n_episodes=abc"], "bad value for 'eval.n_episodes'"),
    (["eval.foo=1"], "unknown key 'eval.foo'"),
    (["+eval.foo=1"], "unknown key 'eval.foo'"),
    (["eval.batch_size=0"], "eval.batch_size must be at least 1"),
    (["env.task=reach-v4"], "unknown MetaWorld task 'reach-v4' (did you mean 'reach-v3'?)"),
    (["env.obs_type=rgb"], "env.obs_type must be one of"),
    (["env.task=reach-v3,push-v3"], "add -m to sweep, or pass one list value: env.task=[reach-v3,push-v3]"),
    (["eval.shard_id=0,1"], "a sweep over eval.shard_id needs multirun: add -m"),
    (["eval.shard_id=a"], "eval.shard_id must be integers, got a"),
    (["eval.num_shards=2,3"], "eval.num_shards cannot be swept; give one value"),
    (["-m", "eval.shard_id=0,2"], "missing 1"),
    (["-m", "eval.shard_id=0,1,1"], "more than once"),
    (["-m", "eval.shard_id=0,1,4", "eval.num_shards=4"], "eval.shard_id 4 is out of range"),
    (["env=gym", "env.gym_id=Nope-v0", "policy=random"], "Gymnasium id 'Nope-v0' is not registered"),
]
ON_THE_COMMAND_LINE = {"env=nope", "-m eval.shard_id=0,2", "env.task=reach-v4"}


def command_line_cases(on_the_command_line: bool) -> list[tuple[list[str], str]]:
    return [case for case in BAD_COMMAND_LINES if (" ".join(case[0]) in ON_THE_COMMAND_LINE) == on_the_command_line]


@pytest.mark.parametrize(("args", "expected"), command_line_cases(True))
def test_bad_command_lines_give_one_clear_line(tmp_path: Path, args: list[str], expected: str) -> None:
    multirun = args[0] == "-m"
    proc = run_eval(*args[multirun:], out_dir=tmp_path / "out", multirun=multirun, check=False, timeout=120)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "out" / "episodes.jsonl").exists()


@pytest.mark.parametrize(("args", "expected"), command_line_cases(False))
def test_bad_command_lines_are_refused_with_the_one_line_they_print(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    """The same refusals in this process: the line eval.py prints after `error: ` (see the test above)."""
    from lerobot_hydra.app.cli import describe_hydra_error
    from lerobot_hydra.launch.shards import shard_sweep_total

    if args[0] == "-m":  # checked when the multirun starts, before anything is launched
        with pytest.raises(UserError) as refused:
            shard_sweep_total(args[1:])
        line = str(refused.value)
    else:
        with pytest.raises(Exception) as refused:  # noqa: PT011 - a UserError, or Hydra's, described below
            run_here(*args, out_dir=tmp_path / "out")
        line = str(refused.value) if isinstance(refused.value, UserError) else describe_hydra_error(refused.value)
    assert line is not None, refused.value
    assert "\n" not in line and expected in line, line
    assert not (tmp_path / "out" / "episodes.jsonl").exists()


def test_cfg_job_prints_the_composed_config() -> None:
    proc = run_eval("--cfg", "job", timeout=60)
    cfg = OmegaConf.create(proc.stdout)
    assert cfg.env._target_.endswith("MetaWorldEnvConfig")
    assert cfg.policy._target_.endswith("MetaWorldExpertConfig")
    assert cfg.seed == 1000 and cfg.device == "auto"
    # The expert's own settings win over the env and eval defaults, and command-line overrides win over them.
    assert cfg.env.obs_type == "state" and cfg.eval.max_episodes_rendered == 0


def test_policy_settings_sit_between_group_defaults_and_the_command_line(compose) -> None:
    assert compose("policy=random").eval.max_episodes_rendered == 10
    assert compose("policy=random").env.obs_type == "pixels_agent_pos"
    cfg = compose("eval.max_episodes_rendered=3", "env.obs_type=pixels")
    assert cfg.eval.max_episodes_rendered == 3 and cfg.env.obs_type == "pixels"
