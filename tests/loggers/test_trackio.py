"""Trackio for real, locally (TRACKIO_DIR in a temp dir): eval.py's own run with the W&B logger's content, and a
training loop's active run getting the evaluations at its steps. Needs the trackio extra (Python >= 3.12: the
LeRobot 0.4.4 line pins huggingface-hub below what trackio needs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, read_json, run_eval
from tests.loggers.test_wandb import TINY

pytest.importorskip("trackio", reason="the trackio extra installs on Python >= 3.12 only (see pyproject.toml)")

READ = """
import json, sys
from trackio.sqlite_storage import SQLiteStorage
project = sys.argv[1]
runs = SQLiteStorage.get_runs(project)
print(json.dumps({run: SQLiteStorage.get_logs(project, run) for run in runs}, default=str))
"""

TRAINER = """
import numpy as np, gymnasium as gym, trackio
import lerobot_hydra
from lerobot_hydra.policies.random import RandomPolicy

if __name__ == "__main__":
    trackio.init(project="trainer", name="train")
    policy = RandomPolicy(gym.spaces.Box(-1.0, 1.0, (4,), np.float32))
    with lerobot_hydra.Evaluator({overrides!r}) as evaluator:
        for step in (3, 6):
            trackio.log({{"loss": 1.0 / step}}, step=step)
            results = evaluator.evaluate(policy, step=step)
    trackio.finish()
    print("pc_success", results.overall.pc_success)
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "PYTHONPATH": str(ROOT)}


def trackio_logs(tmp_path: Path, project: str) -> dict[str, list[dict]]:
    proc = subprocess.run(
        [sys.executable, "-c", READ, project], env=_env(tmp_path), capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout)


def test_eval_py_logs_a_trackio_run_with_the_wandb_content(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {"TRACKIO_DIR": str(tmp_path / "trackio")}
    run_eval(*TINY, "eval.max_episodes_rendered=1", "logger=trackio", "logger.trackio.project=p", out_dir=out, env=env)
    info = read_json(out / "eval_info.json")
    ((name, rows),) = trackio_logs(tmp_path, "p").items()
    (row,) = rows
    assert row["overall/pc_success"] == pytest.approx(info["overall"]["pc_success"])
    assert row["overall/ci95_high"] == pytest.approx(info["overall"]["ci95_pc_success"][1])
    for group, metrics in info["per_group"].items():
        assert row[f"per_group/{group}/n_episodes"] == metrics["n_episodes"]
    per_task = row["per_task"]["_value"]
    assert [r["task_name"] for r in per_task] == ["reach-v3", "drawer-close-v3"]
    assert [r["pc_success"] for r in per_task] == [t["metrics"]["pc_success"] for t in info["per_task"]]
    assert len(row["episodes"]["_value"]) == 4
    assert row["plots/success_by_task"]["_type"] == "trackio.image"
    videos = [v for k, v in row.items() if k.startswith("videos/")]
    assert len(videos) == 2 and all(v["_type"] == "trackio.video" for v in videos)  # one per task
    for video in videos:
        assert (tmp_path / "trackio" / "media" / video["file_path"]).is_file()


def test_a_trainers_active_trackio_run_gets_the_evaluations_at_its_steps(tmp_path: Path) -> None:
    overrides = [o for o in TINY if o != "policy=random"] + ["logger=trackio"]
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER.format(overrides=overrides))
    proc = subprocess.run(
        [sys.executable, str(script)], env=_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    logs = trackio_logs(tmp_path, "trainer")
    assert list(logs) == ["train"]  # no run was added
    evaluations = [r for r in logs["train"] if "eval/overall/pc_success" in r]
    assert [r["step"] for r in evaluations] == [3, 6]
    last = float(proc.stdout.split("pc_success")[-1])
    assert evaluations[-1]["eval/overall/pc_success"] == pytest.approx(last)
    assert {r["step"] for r in logs["train"] if "loss" in r} == {3, 6}
