"""W&B for real, offline: what a single run, the shards of a sweep and their merge log, read back from the
runs' own record files (offline runs write no wandb-summary.json); and W&B failures that never fail a run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.loggers.run_meta import dir_name, merged_run
from lerobot_hydra.loggers.wandb import WandbLoggerConfig
from lerobot_hydra.publish.publish import publish_merged
from lerobot_hydra.publish.video import VideoRecorder, rebase_video_paths
from lerobot_hydra.results.aggregate import aggregate
from tests.conftest import ROOT, read_json, run_eval
from tests.helpers.wandb_records import wandb_records

# A cheap MetaWorld run: random policy, short episodes, tiny frames.
TINY = (
    "env.task=[reach-v3,drawer-close-v3]",
    "policy=random",
    "env.obs_type=state",
    "env.observation_height=32",
    "env.observation_width=32",
    "env.episode_length=5",
    "eval.n_episodes=2",
    "eval.batch_size=2",
)


def offline_runs(root: Path) -> list[dict[str, Any]]:
    """Every offline W&B run under `root`: its run record, config, summary and the files it logged."""
    from wandb.proto import wandb_internal_pb2 as pb

    runs = []
    for path in sorted(root.rglob("offline-run-*/run-*.wandb")):
        run: dict[str, Any] = {"dir": path.parent, "summary": {}, "files": [], "history": []}
        for data in wandb_records(path):
            record = pb.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                r = record.run
                run.update(id=r.run_id, group=r.run_group, job_type=r.job_type, name=r.display_name)
                run["config"] = {u.key: json.loads(u.value_json) for u in r.config.update}
            elif kind == "summary":
                for item in record.summary.update:
                    key = "/".join(item.nested_key) if item.nested_key else item.key
                    run["summary"][key] = json.loads(item.value_json)
            elif kind == "files":
                run["files"].extend(f.path for f in record.files.files)
            elif kind == "history":
                items = record.history.item
                row = {"/".join(i.nested_key) if i.nested_key else i.key: json.loads(i.value_json) for i in items}
                run["history"].append(row)
        runs.append(run)
    return runs


def logged(run: dict[str, Any], prefix: str, suffix: str) -> list[Path]:
    return [run["dir"] / "files" / f for f in run["files"] if f.startswith(prefix) and f.endswith(suffix)]


def assert_metrics(run: dict[str, Any], info: dict[str, Any]) -> None:
    summary = run["summary"]
    for key in ("pc_success", "avg_sum_reward", "avg_max_reward", "n_episodes"):
        assert summary[f"overall/{key}"] == pytest.approx(info["overall"][key])
        for group, metrics in info["per_group"].items():
            assert summary[f"per_group/{group}/{key}"] == pytest.approx(metrics[key])


def test_offline_single_run_logs_metrics_tables_plot_and_videos(tmp_path: Path) -> None:
    proc = run_eval(
        *TINY, "eval.max_episodes_rendered=1", "logger=wandb", "logger.wandb.mode=offline", out_dir=tmp_path
    )
    info = read_json(tmp_path / "eval_info.json")
    (run,) = offline_runs(tmp_path / "wandb")
    assert run["job_type"] == "eval" and run["group"] == ""
    assert_metrics(run, info)
    assert run["config"]["env"]["task"] == ["reach-v3", "drawer-close-v3"] and run["config"]["eval"]["n_episodes"] == 2
    assert run["config"]["run"]["job_type"] == "eval"
    (table,) = logged(run, "media/table/per_task", ".table.json")
    rows = json.loads(table.read_text())
    assert [r[2] for r in rows["data"]] == ["reach-v3", "drawer-close-v3"]
    assert rows["columns"][6] == "pc_success"
    assert [r[6] for r in rows["data"]] == [t["metrics"]["pc_success"] for t in info["per_task"]]
    assert logged(run, "media/table/episodes", ".table.json")
    (plot,) = logged(run, "media/images/plots/success_by_task", ".png")
    assert plot.read_bytes() == (tmp_path / "success_by_task.png").read_bytes()
    videos = logged(run, "media/videos/", ".mp4")
    assert len(videos) == 2  # one per task
    assert {v.read_bytes() for v in videos} == {(tmp_path / p).read_bytes() for p in info["overall"]["video_paths"]}
    assert "W&B offline run" in proc.stdout


@pytest.mark.slow
def test_shards_and_their_merge_share_the_sweep_group_and_a_rerun_merge_adds_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No key and no WANDB_MODE: offline is chosen, and said once per process.
    for var in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    sweep = tmp_path / "sweep"
    proc = run_eval(
        *TINY, "eval.max_episodes_rendered=1", "logger=wandb", "eval.shard_id=0,1", multirun=True, out_dir=sweep
    )
    assert proc.stdout.count("no API key configured") == 1
    merged_info = read_json(sweep / "eval_info.json")
    runs = offline_runs(sweep)
    by_type = {t: [r for r in runs if r["job_type"] == t] for t in ("shard", "merged")}
    assert len(runs) == 3 and len(by_type["shard"]) == 2 and len(by_type["merged"]) == 1
    assert {r["group"] for r in runs} == {dir_name(sweep)}
    assert len({r["id"] for r in runs}) == 3
    (merged,) = by_type["merged"]
    assert_metrics(merged, merged_info)
    assert merged["summary"]["overall/n_episodes"] == 4
    assert sorted(r["summary"]["overall/n_episodes"] for r in by_type["shard"]) == [2, 2]
    assert "shard_id" not in merged["config"]["eval"] and merged["config"]["run"]["num_shards"] == 2
    assert logged(merged, "media/table/per_task", ".table.json")
    assert logged(merged, "media/images/plots/success_by_task", ".png")
    assert all(not logged(r, "media/videos/", ".mp4") for r in by_type["shard"])  # videos go to the merged run
    # The merged results point at the shards' videos (paths relative to the sweep dir), and the merged run has them.
    assert len(merged_info["overall"]["video_paths"]) == 2
    assert all((sweep / p).is_file() for p in merged_info["overall"]["video_paths"])
    assert len(logged(merged, "media/videos/", ".mp4")) == 2

    # Merging again (by hand) writes the same merged run anew: still one offline copy, with the same id, and none
    # of the earlier copy left in it (a file put there is gone; its dir is named to the second, so it may recur).
    from lerobot_hydra.sweeps.shards import main as merge_main

    (merged["dir"] / "files" / "left-by-the-first-merge").write_text("")
    assert merge_main([str(sweep)]) == 0
    import wandb

    wandb.teardown()  # this process's offline run is written in the background: flush it before reading it back
    (again,) = [r for r in offline_runs(sweep) if r["job_type"] == "merged"]
    assert again["id"] == merged["id"] and not (again["dir"] / "files" / "left-by-the-first-merge").exists()
    assert_metrics(again, merged_info)
    assert logged(again, "media/table/per_task", ".table.json")


def test_merged_run_logs_a_sample_of_the_shards_videos(tmp_path: Path) -> None:
    """publish_merged, as the merge calls it, on records whose videos live in the shard dirs."""
    sweep = tmp_path / "sweep"
    records = []
    for shard, tasks in enumerate([(0, 1), (2,)]):
        shard_dir = sweep / f"shard_{shard}_of_2"
        recorder = VideoRecorder(shard_dir, fps=10, max_per_task=2)
        for task_id in tasks:
            for k in range(3):
                path = None
                if recorder.wants(k):
                    video = recorder.start(TaskSpec("g", task_id, f"t{task_id}", "t", 5), k)
                    for t in range(3):
                        video.add(np.full((8, 8, 3), 60 * t, np.uint8))
                    path = video.finish()
                record = EpisodeRecord("g", task_id, f"t{task_id}", "t", k, k, k == 0, 1.0, 1.0, 2, 0.1, None, path)
                records.extend(rebase_video_paths([record], shard_dir, sweep))
        recorder.close()
    info = aggregate(records, eval_s=1.0)
    config = {
        "env": {"task": "x"},
        "eval": {"shard_id": 1, "n_episodes": 3},
        "logger": {
            "wandb": {
                "_target_": "lerobot_hydra.loggers.wandb.WandbLoggerConfig",
                "mode": "offline",
                "max_videos": 4,
            }
        },
    }
    publish_merged(info, sweep, "Merged", sweep_dir=sweep, label="policy=random", config=config, num_shards=2)
    import wandb

    wandb.teardown()  # this process's offline run is written in the background: flush it before reading it back
    (run,) = offline_runs(sweep / "wandb")
    assert run["job_type"] == "merged" and run["group"] == dir_name(sweep)
    assert run["id"] == merged_run(config, sweep, "policy=random").run_id
    assert run["name"] == f"{dir_name(sweep)} policy=random merged"
    # Four of the six videos: the first episode of every task, then the second of the first task.
    videos = run["summary"]
    captions = sorted(c for key, v in videos.items() if key.endswith("/captions") for c in v)
    assert captions == [
        "t0 episode 0: success",
        "t0 episode 1: failure",
        "t1 episode 0: success",
        "t2 episode 0: success",
    ]
    assert len(logged(run, "media/videos/", ".mp4")) == 4


@pytest.mark.slow
def test_wandb_failures_are_one_warning_and_never_fail_the_evaluation(tmp_path: Path) -> None:
    # wandb not importable.
    fake = tmp_path / "fake_site" / "wandb"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('wandb is broken here')\n")
    pythonpath = os.pathsep.join([str(fake.parent), str(ROOT), os.environ.get("PYTHONPATH", "")])
    proc = run_eval(
        *TINY, "eval.max_episodes_rendered=0", "logger=wandb", out_dir=tmp_path / "a", env={"PYTHONPATH": pythonpath}
    )
    assert (tmp_path / "a" / "eval_info.json").is_file()
    assert proc.stdout.count("W&B logging skipped") == 1 and 'pip install -e ".[wandb]"' in proc.stdout
    # Online without an API key: wandb.init refuses.
    proc = run_eval(
        *TINY,
        "eval.max_episodes_rendered=0",
        "logger=wandb",
        "logger.wandb.mode=online",
        out_dir=tmp_path / "b",
        env={"WANDB_API_KEY": "", "NETRC": str(tmp_path / "no-netrc"), "HOME": str(tmp_path)},
    )
    assert (tmp_path / "b" / "eval_info.json").is_file()
    assert proc.stdout.count("W&B logging failed") == 1


def test_bad_logger_settings_fail_before_anything_runs(tmp_path: Path) -> None:
    proc = run_eval(*TINY, "logger=wandb", "logger.wandb.mode=sometimes", out_dir=tmp_path, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: logger.wandb.mode must be one of online, offline")
    assert not (tmp_path / "episodes.jsonl").exists()
    with pytest.raises(Exception, match="max_videos"):
        WandbLoggerConfig(max_videos=-1)


def test_into_the_trainers_active_run_with_a_prefix_at_its_step(tmp_path: Path) -> None:
    """A training loop's W&B run gets the evaluations (Python API, logger=wandb) at the trainer's steps; no run is
    added."""
    import gymnasium as gym
    import wandb

    import lerobot_hydra
    from lerobot_hydra.policies.random import RandomPolicy

    trainer = wandb.init(project="trainer", mode="offline", dir=str(tmp_path), settings=wandb.Settings(silent=True))
    try:
        evaluator = lerobot_hydra.Evaluator([o for o in TINY if o != "policy=random"] + ["logger=wandb"])
        with evaluator:
            policy = RandomPolicy(gym.spaces.Box(-1.0, 1.0, (4,), np.float32))
            for step in (5, 10):
                trainer.log({"loss": 1.0 / step}, step=step)
                results = evaluator.evaluate(policy, step=step)
    finally:
        trainer.finish()
        wandb.teardown()  # waits for W&B's service to write the run file out
    (run,) = offline_runs(tmp_path / "wandb")
    evaluations = [h for h in run["history"] if "eval/overall/pc_success" in h]
    assert [h["_step"] for h in evaluations] == [5, 10]
    assert all("loss" in h for h in evaluations)  # the same rows as the trainer's steps
    assert evaluations[-1]["eval/overall/pc_success"] == pytest.approx(results.overall.pc_success)
    assert evaluations[-1]["eval/overall/ci95_high"] == pytest.approx(results.overall.ci95_pc_success[1])
    assert logged(run, "media/table/eval/per_task", ".table.json")
