"""env=lerobot: any env type the installed LeRobot registers, through our plan, workers, shards and sinks.

The settings are the type's own fields, checked against its dataclass; what cannot run is refused in one line; a
third-party `lerobot_env_*` plugin (lerobot-env-so101) runs end to end, sharded and merged, with its scripted
controller as the policy. Parity with lerobot-eval and the native presets (pusht, metaworld) is tested in
tests/lerobot/ (test_lerobot_policies.py, test_lerobot_eval_parity.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from lerobot_hydra.core.errors import UserError
from tests.conftest import read_episodes, read_json, run_eval, run_here

pytest.importorskip("lerobot")


def lerobot_minor() -> int:
    from importlib.metadata import version

    return int(version("lerobot").split(".")[1])


needs_06 = pytest.mark.skipif(lerobot_minor() < 6, reason="env=lerobot runs on LeRobot 0.6 (the Python 3.12 line)")


def check(**node: object) -> None:
    from lerobot_hydra.envs.lerobot.config import LeRobotEnvConfig

    LeRobotEnvConfig.check_node(OmegaConf.create({"_target_": "x", **node}), "env")


@pytest.mark.skipif(lerobot_minor() >= 6, reason="the refusal of LeRobot 0.4.4 (Python 3.11 line)")
def test_lerobot_044_is_refused_in_one_line(tmp_path: Path) -> None:
    proc = run_eval("env=lerobot", "policy=random", out_dir=tmp_path, check=False, timeout=300)
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: env=lerobot needs LeRobot 0.6 or newer") and "0.4.4 is installed" in line


@needs_06
def test_the_types_fields_are_the_settings_and_unknown_ones_list_the_valid_ones() -> None:
    check(type="pusht", obs_type="pixels_agent_pos", episode_length=12)
    with pytest.raises(
        UserError, match=r"^unknown key 'env.obs_typ' for env.type=pusht \(did you mean 'obs_type'\?\); valid keys: "
    ):
        check(type="pusht", obs_typ="pixels")
    with pytest.raises(UserError) as err:
        check(type="so101", nosuch=1)
    assert "valid keys: " in str(err.value) and "random_block_position" in str(err.value)  # the plugin's own field
    with pytest.raises(UserError, match=r"^env.max_parallel_tasks is lerobot-eval's run setting.*eval.max_parallel"):
        check(type="pusht", max_parallel_tasks=2)
    with pytest.raises(UserError, match=r"^env.episode_length=abc: LeRobot rejects it: .*episode_length"):
        check(type="pusht", episode_length="abc")
    with pytest.raises(UserError, match=r"env.type=pushtt is not an env type .*did you mean 'pusht'.*so101"):
        check(type="pushtt")


@needs_06
def test_what_cannot_run_in_our_workers_is_refused_in_one_line() -> None:
    from lerobot_hydra.envs.lerobot.sim import describe

    with pytest.raises(UserError, match=r"env.type=gym_manipulator drives a real robot"):
        check(type="gym_manipulator")
    # A simulator that is not installed: which module, and how to install it.
    with pytest.raises(UserError) as missing:
        describe("robocasa", {}, False)
    assert str(missing.value).startswith("env.type=robocasa needs the simulator module 'robocasa'")
    assert "pip install robocasa" in str(missing.value) and "\n" not in str(missing.value)
    # LIBERO-plus is a fork of LIBERO: hf-libero's standard LIBERO in its place is refused, not run as LIBERO-plus.
    with pytest.raises(UserError, match=r"^env.type=libero_plus needs LIBERO-plus's 'libero' package and assets, but"):
        describe("libero_plus", {}, False)
    # A Hub env runs the Hub repo's code only when the user allows it.
    with pytest.raises(UserError, match=r"env.type=isaaclab_arena runs code from the Hugging Face Hub .* "):
        describe("isaaclab_arena", {}, False)


@needs_06
def test_an_unknown_field_on_the_command_line_is_one_line(tmp_path: Path) -> None:
    proc = run_eval("env=lerobot", "env.type=pusht", "env.nosuch=1", "policy=random", out_dir=tmp_path, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("error: unknown key 'env.nosuch' for env.type=pusht")
    assert "obs_type" in lines[-1] and "Traceback" not in proc.stderr


SO101 = ["env=lerobot", "env.type=so101", "env.action_scale=0.025", "env.reward_type=dense", "env.episode_length=30"]
EPISODES = ["eval.n_episodes=4", "eval.batch_size=2"]


@needs_06
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_so101_plugin_runs_sharded_merged_and_filmed_with_its_scripted_controller(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    run_eval(
        *SO101,
        "policy=so101_scripted",
        *EPISODES,
        "eval.max_episodes_rendered=1",
        "eval.shard_id=0,1",
        out_dir=sweep,
        multirun=True,
        timeout=900,
    )
    merged = read_json(sweep / "eval_info.json")
    assert merged["overall"]["n_episodes"] == 4
    shards = sorted(sweep.glob("**/shard_*_of_2"))
    records = [r for shard in shards for r in read_episodes(shard)]
    assert sorted(r["episode_index"] for r in records) == [0, 1, 2, 3]
    assert {(r["task_group"], r["task_name"], r["steps"]) for r in records} == {("so101", "SO101PickCube-v0", 30)}
    assert list(sweep.glob("**/videos/*/episode_0.mp4")), "the first episode is filmed"
    # The scripted controller drives the arm to the block: its dense reward beats random actions' by far.
    baseline = tmp_path / "random"
    run_here(*SO101, "policy=random", *EPISODES, out_dir=baseline)
    scripted = sum(r["sum_reward"] for r in records) / 4
    random = sum(r["sum_reward"] for r in read_episodes(baseline)) / 4
    assert scripted > 2 * random > 0, (scripted, random)
    identity = json.loads((baseline / "shard_0_of_1.json").read_text())["identity"]["env"]
    assert identity["type"] == "so101" and identity["reward_type"] == "dense"  # the type's fields: the fingerprint
    # A resume with another value of a type's field is refused: the fingerprint holds it.
    with pytest.raises(UserError):
        run_here(*SO101, "env.reward_type=sparse", "policy=random", *EPISODES, out_dir=baseline)


@needs_06
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_aloha_runs_through_the_adapter_beside_metaworlds_mujoco(tmp_path: Path) -> None:
    """gym-aloha on dm-control 1.0.28 shares MuJoCo 3.3.0 with MetaWorld (the aloha extra)."""
    pytest.importorskip("gym_aloha")
    import mujoco

    assert mujoco.__version__ == "3.3.0"
    run = ["env=lerobot", "env.type=aloha", "env.task=AlohaTransferCube-v0", "env.episode_length=5", "policy=random"]
    run_here(*run, "eval.n_episodes=2", "eval.batch_size=2", out_dir=tmp_path)
    records = read_episodes(tmp_path)
    assert sorted((r["task_group"], r["task_name"], r["episode_index"], r["steps"]) for r in records) == [
        ("aloha", "transfer_cube", k, 5) for k in range(2)
    ]
