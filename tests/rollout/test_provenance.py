"""Trustworthy results: a task named twice counts once, the checkpoint is part of the fingerprint, every result
says which software made it (and the merge refuses shards made by different versions), camera names are checked.

Real MetaWorld with tiny configs (state observations, 10-step episodes, 1-2 episodes per task), run in-process
where the CLI is not the point."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from lerobot_hydra.app.evaluation import evaluate_config
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import EpisodeRecord, read_jsonl
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.launch.callbacks import MergeShards
from lerobot_hydra.results.eval_info import to_eval_info
from lerobot_hydra.rollout.plan import TaskBlock, shard_plan
from lerobot_hydra.schemas.schema import instantiate_node, validate
from lerobot_hydra.store.run_store import RunStore
from lerobot_hydra.sweeps.shards import merge_sweep
from tests.conftest import ROOT, read_json, run_eval
from tests.loggers.test_wandb import offline_runs

TINY = ("policy=random", "env.obs_type=state", "env.episode_length=10", "eval.batch_size=1")
PROVENANCE_KEYS = {
    "lerobot_hydra",
    "python",
    "packages",
    "outcome_relevant",
    "checkpoint",
    "device",
    "gpu",
    "mujoco_gl",
}


def evaluate(compose: Callable, out_dir: Path, *overrides: str) -> dict[str, Any]:
    cfg = compose(*overrides, "eval.max_episodes_rendered=0", "eval.use_async_envs=false", "device=cpu")
    return to_eval_info(evaluate_config(cfg, validate(cfg), out_dir, ""))


def units(records: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    return [(r["task_group"], r["task_id"], r["episode_index"]) for r in records]


# --- a task named twice ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ("[reach-v3,reach-v3]", ["reach-v3/0"]),
        ("[hard,hard]", [f"hard/{i}" for i in range(6)]),
        ("[very_hard,reach-v3,very_hard]", [*(f"very_hard/{i}" for i in range(5)), "reach-v3/0"]),
    ],
)
def test_a_task_named_twice_is_run_and_counted_once(
    compose: Callable, tmp_path: Path, task: str, expected: list[str]
) -> None:
    info = evaluate(compose, tmp_path, f"env.task={task}", "eval.n_episodes=2", *TINY)
    assert [f"{t['task_group']}/{t['task_id']}" for t in info["per_task"]] == expected
    assert info["overall"]["n_episodes"] == 2 * len(expected)
    recorded = units([r.to_dict() for r in read_jsonl(tmp_path / "episodes.jsonl")])
    assert len(recorded) == len(set(recorded)) == 2 * len(expected)
    shard = read_json(tmp_path / "shard_0_of_1.json")
    assert sum(block["last"] - block["first"] + 1 for block in shard["plan"]) == 2 * len(expected)
    assert shard["complete"]


def test_groups_that_overlap_select_each_task_once(compose: Callable) -> None:
    def tasks(task: str) -> list[tuple[str, int]]:
        return [t.key for t in instantiate_node(compose(f"env.task={task}").env).tasks()]

    mt50 = tasks("all")
    assert len(mt50) == 50
    assert tasks("[all,easy]") == mt50
    # reach-v3 is one of the easy tasks: it runs once, in its group.
    assert tasks("[reach-v3,easy]") == tasks("easy")


def test_a_repeat_is_dropped_with_one_log_line(compose: Callable, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="lerobot_hydra"):
        env_cfg = instantiate_node(compose("env.task=[drawer-open-v3,hard,drawer-open-v3,hard]").env)
        env_cfg.tasks()
        env_cfg.tasks()
    lines = [r.getMessage() for r in caplog.records if "more than once" in r.getMessage()]
    assert lines == ["env.task names drawer-open-v3, hard more than once; each is used once"]


@pytest.mark.libero
def test_libero_suites_and_task_ids_named_twice_select_each_task_once(compose: Callable) -> None:
    overrides = ("env=libero", "policy=random", "env.task=[libero_goal,libero_10,libero_goal]", "env.task_ids=[3,0,3]")
    keys = [t.key for t in instantiate_node(compose(*overrides).env).tasks()]
    assert keys == [("libero_goal", 0), ("libero_goal", 3), ("libero_10", 0), ("libero_10", 3)]


def test_envs_declare_the_distributions_they_simulate_with(compose: Callable) -> None:
    def declared(*overrides: str) -> list[str]:
        return instantiate_node(compose(*overrides, "policy=random").env).distributions()

    assert declared() == ["metaworld"]
    assert declared("env=libero") == ["hf-libero", "robosuite"]
    assert declared("env=pusht") == ["gymnasium", "gym-pusht"]
    assert declared("env=gym", "env.gym_id=CartPole-v1") == ["gymnasium"]


def test_a_duplicated_task_spec_never_doubles_a_unit(tmp_path: Path) -> None:
    task = TaskSpec("reach-v3", 0, "reach-v3", "Reach a goal position.", 10)
    plan = shard_plan([task.key, task.key], 2, 0, 1)
    assert plan == [TaskBlock("reach-v3", 0, 0, 1)]
    record = EpisodeRecord("reach-v3", 0, "reach-v3", task.description, 0, 1000, False, 0.0, 0.0, 10, 0.1)
    with RunStore(tmp_path, {"identity": 1}, 0, 1, [task, task], plan, "") as store:
        store.add(record)
        store.add(record)
        assert [r.unit for r in read_jsonl(tmp_path / "episodes.jsonl")] == [("reach-v3", 0, 0)]
        assert store.done() == {("reach-v3", 0, 0)}


# --- the checkpoint's identity -------------------------------------------------------------------------------


def _perturb_weights(directory: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(directory / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 0.01
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})


@pytest.fixture(scope="module")
def act_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from devkit.lerobot_checkpoints import tiny_act

    return tiny_act(tmp_path_factory.mktemp("checkpoints") / "act")


def test_a_changed_checkpoint_is_refused_on_resume_and_by_the_merge(
    compose: Callable, tmp_path: Path, act_checkpoint: Path
) -> None:
    # checkpoints/last -> a training step dir, as LeRobot's training writes it
    trained = tmp_path / "checkpoints" / "000100"
    shutil.copytree(act_checkpoint, trained)
    last = tmp_path / "checkpoints" / "last"
    last.symlink_to(trained.name)
    act = ("policy=act", f"policy.path={last}", "env.task=reach-v3", "env.obs_type=state", "env.episode_length=10")
    run = ("eval.n_episodes=2", "eval.batch_size=1")
    weights_sha256 = hashlib.sha256((trained / "model.safetensors").read_bytes()).hexdigest()

    info = evaluate(compose, tmp_path / "run", *act, *run)
    sweep = tmp_path / "sweep"
    evaluate(compose, sweep / "s0", *act, *run, "eval.shard_id=0", "eval.num_shards=2")
    _perturb_weights(trained)  # re-trained in place
    with pytest.raises(
        UserError, match=r"different configuration \(differs in: checkpoint\.files\.model\.safetensors\)"
    ):
        evaluate(compose, tmp_path / "run", *act, *run)
    evaluate(compose, sweep / "s1", *act, *run, "eval.shard_id=1", "eval.num_shards=2")
    result = merge_sweep(sweep, write=False)
    assert not result.ok and not result.merged
    assert any("differ in: checkpoint.files.model.safetensors" in p for p in result.problems), result.problems

    files = info["provenance"]["checkpoint"]["files"]
    assert set(files) >= {"config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"}
    assert any(name.endswith(".safetensors") and name.startswith("policy_preprocessor") for name in files)
    assert files["model.safetensors"] == weights_sha256
    shard = read_json(tmp_path / "run" / "shard_0_of_1.json")
    assert shard["identity"]["checkpoint"] == shard["provenance"]["checkpoint"] == info["provenance"]["checkpoint"]
    assert info["provenance"]["packages"]["lerobot"] and "lerobot" in info["provenance"]["outcome_relevant"]


def test_a_hub_checkpoint_is_identified_by_the_commit_it_resolved_to(
    act_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    from lerobot_hydra.policies.lerobot.config import LeRobotPolicyConfig

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--someone--tiny_act"
    shutil.copytree(act_checkpoint, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert LeRobotPolicyConfig(path="someone/tiny_act").identity() == {"repo_id": "someone/tiny_act", "commit": commit}


def test_policies_without_a_checkpoint_have_no_identity(compose: Callable) -> None:
    for policy in ("random", "metaworld_expert"):
        assert instantiate_node(compose(f"policy={policy}").policy).identity() is None


# --- provenance ----------------------------------------------------------------------------------------------


def assert_provenance(provenance: dict[str, Any]) -> None:
    assert set(provenance) >= PROVENANCE_KEYS
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert provenance["lerobot_hydra"]["version"] == "0.1.0"
    assert provenance["lerobot_hydra"]["git_revision"].startswith(head.strip())
    packages = provenance["packages"]
    assert {"torch", "mujoco", "gymnasium", "numpy", "metaworld"} <= set(packages) and all(packages.values())
    assert "robosuite" not in packages and "hf-libero" not in packages  # only what the env uses
    assert set(provenance["outcome_relevant"]) == {"torch", "mujoco", "metaworld"}
    assert provenance["checkpoint"] is None and provenance["device"] == "cpu" and provenance["gpu"] is None
    assert provenance["mujoco_gl"] == "osmesa"


@pytest.mark.slow
def test_every_result_records_its_provenance_and_the_merge_checks_versions(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    run_eval(
        *TINY,
        "env.task=reach-v3",
        "eval.n_episodes=2",
        "eval.shard_id=0,1",
        "logger=wandb",
        "logger.wandb.mode=offline",
        out_dir=sweep,
        multirun=True,
    )
    merged = read_json(sweep / "eval_info.json")
    assert_provenance(merged["provenance"])
    assert "differences" not in merged["provenance"]
    shards = sorted(sweep.rglob("shard_*_of_2.json"))
    assert len(shards) == 2
    for path in shards:
        assert_provenance(read_json(path)["provenance"])
    runs = offline_runs(sweep)
    assert sorted(r["job_type"] for r in runs) == ["merged", "shard", "shard"]
    for run in runs:
        assert_provenance(run["config"]["provenance"])

    doctored = json.loads(shards[1].read_text())
    doctored["provenance"]["packages"]["mujoco"] = "3.4.0"
    shards[1].write_text(json.dumps(doctored))
    (sweep / "eval_info.json").unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "lerobot_hydra.sweeps.shards", str(sweep)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "ran different software that can change outcomes (mujoco 3.3" in proc.stderr
    assert "3.4.0 in shard 1 of 2" in proc.stderr and "--accept-version-mismatch" in proc.stderr
    assert not (sweep / "eval_info.json").exists()

    # The sweep's own merge, told to accept the difference (hydra.callbacks.merge_shards.accept_version_mismatch)
    callback = MergeShards(accept_version_mismatch=True)
    callback.on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    assert read_json(sweep / "eval_info.json")["provenance"]["differences"]["packages.mujoco"][1] == "3.4.0"
    (sweep / "eval_info.json").unlink()

    proc = subprocess.run(
        [sys.executable, "-m", "lerobot_hydra.sweeps.shards", "--accept-version-mismatch", str(sweep)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    accepted = read_json(sweep / "eval_info.json")["provenance"]
    assert accepted["differences"]["packages.mujoco"][1] == "3.4.0"
    assert "mujoco" not in accepted["packages"] and accepted["packages"]["metaworld"]


def test_a_single_run_records_provenance_and_resume_refuses_other_versions(compose: Callable, tmp_path: Path) -> None:
    info = evaluate(compose, tmp_path, "env.task=reach-v3", "eval.n_episodes=1", *TINY)
    assert_provenance(read_json(tmp_path / "eval_info.json")["provenance"])
    assert info["provenance"] == read_json(tmp_path / "shard_0_of_1.json")["provenance"]
    shard = read_json(tmp_path / "shard_0_of_1.json")
    shard["provenance"]["packages"]["metaworld"] = "3.0.0"
    (tmp_path / "shard_0_of_1.json").write_text(json.dumps(shard))
    with pytest.raises(UserError, match=r"holds episodes made with other software \(metaworld 3\.0\.0 in its recorded"):
        evaluate(compose, tmp_path, "env.task=reach-v3", "eval.n_episodes=1", *TINY)


def test_git_revision_is_none_outside_a_checkout_or_without_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lerobot_hydra.rollout.provenance import git_revision

    assert git_revision(tmp_path) is None
    assert git_revision(ROOT)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert git_revision(ROOT) is None


# --- camera names ---------------------------------------------------------------------------------------------


def test_an_unknown_metaworld_camera_is_refused_with_the_valid_ones(compose: Callable) -> None:
    with pytest.raises(UserError) as err:
        instantiate_node(compose("env.camera_name=corner5").env)
    message = str(err.value)
    assert "env.camera_name 'corner5' is not a MetaWorld camera" in message
    assert "corner, corner2, corner3, corner4" in message and "gripperPOV" in message


def test_metaworld_cameras_are_those_of_the_built_model(compose: Callable) -> None:
    from lerobot_hydra.envs.metaworld import model_cameras

    env_cfg = instantiate_node(compose("env.task=[reach-v3,door-open-v3]", "env.obs_type=state").env)
    for task in env_cfg.tasks():
        sim = env_cfg.build(task, render=False)
        model = sim._env.model
        assert tuple(model.camera(i).name for i in range(model.ncam)) == model_cameras()
        sim.close()


def test_an_unknown_libero_camera_is_refused_with_the_valid_ones(compose: Callable) -> None:
    overrides = (
        "env=libero",
        "policy=random",
        "env.camera_names=[agentview,topview]",
        "+env.features_map.topview=observation.images.top",
    )
    with pytest.raises(UserError) as err:
        instantiate_node(compose(*overrides).env)
    assert "env.camera_names: 'topview' is not a camera of every LIBERO scene" in str(err.value)
    assert "valid cameras: agentview, robot0_eye_in_hand, frontview" in str(err.value)
