"""The shard file is written and read by one class (store/shard_file.py `ShardFile`): what a run writes is what
the merge loads, field for field, and its name is built and parsed in one place (core/labels.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lerobot_hydra.core.layout import parse_shard_file_name, shard_dir_name, shard_file_name
from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.rollout.plan import shard_plan
from lerobot_hydra.store.shard_file import (
    SHARD_FORMAT,
    ShardFile,
    ShardFileError,
    StartedRun,
    find_shard_files,
    fingerprint,
)

TASKS = [TaskSpec("easy", i, f"task-{i}", f"do task {i}", 20) for i in range(2)]


def record(task: TaskSpec, k: int) -> EpisodeRecord:
    return EpisodeRecord(
        task.task_group, task.task_id, task.name, task.description, k, 1000 + k, k % 2 == 0, 1.5, 1.0, 9, 0.25
    )


def test_what_a_run_writes_is_what_the_merge_loads(tmp_path: Path) -> None:
    plan = shard_plan([t.key for t in TASKS], 3, 1, 2)
    shard_file = ShardFile.of(tmp_path / shard_dir_name(1, 2), 1, 2)
    shard_file.path.parent.mkdir()
    identity = {"env": {"task": "easy"}, "seed": 1000}
    header = shard_file.header(identity, "policy=random", TASKS, plan, {"packages": {"numpy": "2"}})
    shard_file.start(header)
    started = ShardFile(shard_file.path).load()
    assert (started.shard_id, started.num_shards, started.complete, started.records) == (1, 2, False, [])
    assert started.fingerprint == fingerprint(identity) and started.identity == identity
    assert started.task_keys == [t.key for t in TASKS] and started.plan == plan
    assert started.label == "policy=random" and started.provenance == {"packages": {"numpy": "2"}}
    # What a resume checks against its own run.
    assert shard_file.started_run() == StartedRun(fingerprint(identity), identity, {"packages": {"numpy": "2"}})

    records = [record(TASKS[1], k) for k in plan[0].episodes]
    shard_file.finish(header, True, 12.5, records)
    finished = ShardFile(shard_file.path).load()
    assert (finished.complete, finished.eval_s, finished.records) == (True, 12.5, records)
    assert json.loads(shard_file.path.read_text())["format"] == SHARD_FORMAT
    assert find_shard_files(tmp_path) == [shard_file.path]


def test_names_are_built_and_parsed_in_one_place(tmp_path: Path) -> None:
    assert shard_file_name(3, 8) == "shard_3_of_8.json" and parse_shard_file_name(shard_file_name(3, 8)) == (3, 8)
    assert parse_shard_file_name("shard_3_of_8.jsonl") is None and parse_shard_file_name("eval_info.json") is None
    with pytest.raises(ValueError):
        ShardFile(tmp_path / "eval_info.json")
    mislabeled = ShardFile.of(tmp_path, 0, 2)
    mislabeled.start(ShardFile.of(tmp_path, 1, 2).header({}, "", TASKS, [], None))
    with pytest.raises(ShardFileError, match="holds shard 1 of 2, not what its name says"):
        mislabeled.load()
