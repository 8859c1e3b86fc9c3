"""Rollout recording (eval.recording): every step written as a LeRobotDataset with LeRobot's own writer, loaded back
with LeRobot's loader and checked against the episode records; a 2-shard SLURM sweep merged into one dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lerobot_hydra.core.errors import UserError
from tests.conftest import read_json, run_eval, run_here
from tests.sweeps.test_sharding import slurm  # noqa: F401  (the fixture that starts the cluster)

# The MetaWorld expert with state observations: short episodes, some succeed and end early, some do not.
WORKLOAD = (
    "env.task=[reach-v3,push-v3]",
    "env.obs_type=state",
    "eval.n_episodes=2",
    "env.episode_length=50",
    "eval.batch_size=2",
    "eval.recording=all",
)
GROUPS = ["reach-v3", "push-v3"]  # the run's tasks, in order


def load(root: Path) -> Any:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset(f"local/{root.parent.name}", root=root)


def episodes_of(dataset: Any) -> dict[tuple[int, int, int], dict[str, Any]]:
    """Per (task index in the run, task id, episode index): seed, task text, rewards, done flags, success."""
    out: dict[tuple[int, int, int], dict[str, Any]] = {}
    for i in range(len(dataset)):
        frame = dataset[i]
        key = (int(frame["eval.task_index"]), int(frame["eval.task_id"]), int(frame["eval.episode_index"]))
        ep = out.setdefault(key, {"seed": int(frame["eval.seed"]), "task": frame["task"], "rewards": [], "done": []})
        ep["rewards"].append(float(frame["next.reward"]))
        ep["done"].append(bool(frame["next.done"]))
        ep["success"] = ep.get("success", False) or bool(frame["next.success"])
        assert tuple(frame["action"].shape) == (4,)
    return out


def assert_matches(dataset: Any, records: list[dict[str, Any]]) -> None:
    recorded = episodes_of(dataset)
    assert dataset.num_episodes == len(records) == len(recorded)
    for r in records:
        ep = recorded[(GROUPS.index(r["task_group"]), r["task_id"], r["episode_index"])]
        assert (ep["seed"], ep["task"], ep["success"]) == (r["seed"], r["task"], r["success"])
        assert len(ep["rewards"]) == r["steps"]
        assert ep["done"] == [False] * (r["steps"] - 1) + [True]
        assert np.isclose(sum(ep["rewards"]), r["sum_reward"], rtol=1e-5, atol=1e-4)


def test_a_recorded_run_loads_back_with_lerobot_and_matches_its_episode_records(tmp_path: Path) -> None:
    info = run_here(*WORKLOAD, out_dir=tmp_path)
    dataset = load(tmp_path / "recording" / "part-000")
    assert "observation.state" in dataset.features or any(k.startswith("observation.") for k in dataset.features)
    records = info["episodes"]
    assert {r["success"] for r in records} == {True, False}, "the workload should have both outcomes"
    assert_matches(dataset, records)


def test_recording_an_observation_key_the_env_lacks_is_one_line(tmp_path: Path) -> None:
    overrides = [*WORKLOAD[:2], "eval.n_episodes=1", "env.episode_length=3", "eval.batch_size=1"]
    with pytest.raises(UserError, match=r"eval.recording names observation key\(s\) nope .*choose among"):
        run_here(*overrides, "eval.recording=nope", out_dir=tmp_path)
    with pytest.raises(UserError, match="eval.recording_images='gif' is not one of video, png"):
        run_here(*overrides, "eval.recording=all", "eval.recording_images=gif", out_dir=tmp_path / "b")


@pytest.mark.slurm
def test_a_two_shard_dynamic_slurm_sweep_merges_its_recordings_into_one_dataset(
    tmp_path: Path,
    slurm: None,  # noqa: F811
) -> None:
    """Dynamic claims on the local SLURM cluster: each shard job records the blocks it claimed (store.add after the
    lease check); the merge joins them into one dataset."""
    run_eval(
        *WORKLOAD,
        "env.episode_length=20",
        "eval.shard_id=0,1",
        "eval.claims=dynamic",
        "hydra/launcher=submitit_slurm",
        out_dir=tmp_path,
        multirun=True,
    )
    merged = read_json(tmp_path / "eval_info.json")
    parts = sorted(p for p in tmp_path.rglob("shard_*/recording/part-*") if p.is_dir())
    assert len(parts) >= 1  # a dynamic shard that claimed nothing records nothing
    assert all(p.with_name(p.name + ".units.json").is_file() for p in parts)  # every part finished
    # (job dirs named after overrides like env.task=[a,b] are globs to Hugging Face datasets: read their info.json)
    assert sum(read_json(p / "meta" / "info.json")["total_episodes"] for p in parts) == len(merged["episodes"])
    assert_matches(load(tmp_path / "recording"), merged["episodes"])


def test_pusht_images_are_recorded_as_png_frames_and_load_back(tmp_path: Path) -> None:
    overrides = ("env=pusht", "policy=random", "eval.n_episodes=1", "env.episode_length=6", "eval.batch_size=1")
    info = run_here(*overrides, "eval.recording=pixels", "eval.recording_images=png", out_dir=tmp_path)
    dataset = load(tmp_path / "recording" / "part-000")
    assert len(dataset) == info["episodes"][0]["steps"] == 6
    assert dataset.meta.features["observation.image"]["dtype"] == "image"
    assert "observation.state" not in dataset.features  # only the key asked for
    assert tuple(dataset[5]["observation.image"].shape) == (3, 96, 96)
    assert len(list((tmp_path / "recording" / "part-000" / "images").rglob("*.png"))) == 0  # written into parquet
