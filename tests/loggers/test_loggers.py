"""`logger` is a mapping of sinks: several configured at once each get the results; bad settings are named by
their key before anything runs."""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.loggers.base import build_loggers
from lerobot_hydra.loggers.csv import CsvLogger
from lerobot_hydra.loggers.wandb import WandbLogger
from tests.conftest import evaluate_here, run_eval

SMALL = (
    "env.task=[reach-v3,push-v3]",
    "policy=random",
    "env.obs_type=state",
    "env.episode_length=5",
    "eval.n_episodes=2",
    "eval.batch_size=1",
    "eval.use_async_envs=false",
    "eval.max_episodes_rendered=0",
    "device=cpu",
)


def test_wandb_and_csv_configured_together_both_get_the_results(tmp_path: Path) -> None:
    import wandb

    from tests.loggers.test_wandb import assert_metrics, offline_runs

    info = evaluate_here(tmp_path, *SMALL, "logger=[wandb,csv]", "logger.wandb.mode=offline")
    wandb.teardown()  # an in-process offline run is written in the background: flush it before reading it back
    (run,) = offline_runs(tmp_path / "wandb")
    assert run["job_type"] == "eval" and run["summary"]["overall/n_episodes"] == 4
    assert_metrics(run, info)
    with open(tmp_path / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["scope"], r["task_group"]) for r in rows] == [
        ("task", "reach-v3"),
        ("task", "push-v3"),
        ("group", "reach-v3"),
        ("group", "push-v3"),
        ("overall", ""),
    ]
    tasks = {(t["task_group"], t["task_id"]): t for t in info["per_task"]}
    for row in rows[:2]:
        task = tasks[(row["task_group"], int(row["task_id"]))]
        assert int(row["n_episodes"]) == len(task["metrics"]["successes"])
        assert float(row["pc_success"]) == pytest.approx(task["metrics"]["pc_success"])
    overall = info["overall"]
    assert int(rows[-1]["n_episodes"]) == overall["n_episodes"] == 4
    assert float(rows[-1]["avg_sum_reward"]) == pytest.approx(overall["avg_sum_reward"])
    assert [float(rows[-1]["ci95_low"]), float(rows[-1]["ci95_high"])] == pytest.approx(overall["ci95_pc_success"])
    assert all(r["job_type"] == "eval" and r["run"] == run["name"] for r in rows)


def test_the_logger_mapping_builds_every_sink_and_names_a_bad_one_by_its_key(compose: Callable) -> None:
    assert build_loggers(compose().logger) == []
    loggers = build_loggers(compose("logger=[wandb,csv]").logger)
    assert sorted(type(x.inner).__name__ for x in loggers) == [CsvLogger.__name__, WandbLogger.__name__]
    assert [x.timeout_s for x in build_loggers(compose("logger=csv", "logger.csv.timeout_s=5").logger)] == [5.0]
    with pytest.raises(UserError, match=r"^logger\.csv\.timeout_s must be a positive number of seconds, got 0$"):
        build_loggers(compose("logger=csv", "logger.csv.timeout_s=0").logger)
    with pytest.raises(UserError, match=r"^logger\.wandb\.max_videos must be 0 or more, got -1$"):
        build_loggers(compose("logger=[csv,wandb]", "logger.wandb.max_videos=-1").logger)
    with pytest.raises(UserError, match=r"^unknown key 'logger\.csv\.path'"):
        build_loggers(compose("logger=csv", "+logger.csv.path=x.csv").logger)
    with pytest.raises(UserError, match=r"^'logger' maps names to sinks"):
        build_loggers({"_target_": "lerobot_hydra.loggers.csv.CsvLoggerConfig"})


def test_a_sweeps_summary_reaches_the_csv_sink(tmp_path: Path) -> None:
    from lerobot_hydra.publish.publish import publish_sweep
    from lerobot_hydra.sweeps.summary import sweep_summary
    from tests.results.test_stats import entry

    entries = [
        entry(f"policy={p}", {"policy": p, "seed": 1000, "n_episodes": 4}, wins) for p, wins in (("a", 1), ("b", 3))
    ]
    summary = sweep_summary(entries, tmp_path, None)
    config = {"logger": {"csv": {"_target_": "lerobot_hydra.loggers.csv.CsvLoggerConfig"}}}
    publish_sweep([(e.name, e.results) for e in entries], tmp_path, summary, config)
    with open(tmp_path / "sweep_results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["combination"], float(r["pc_success"])) for r in rows] == [("policy=a", 25.0), ("policy=b", 75.0)]
    assert [float(r["ci95_low"]) for r in rows] == pytest.approx(
        [c["ci95_pc_success"][0] for c in summary["combinations"]]
    )


def test_a_logger_whose_package_is_missing_is_refused_before_anything_runs(tmp_path: Path) -> None:
    proc = run_eval(
        *SMALL,
        "logger=csv",
        "logger.csv._target_=tests.helpers.absent_logger.AbsentConfig",
        out_dir=tmp_path,
        check=False,
    )
    error = (
        "error: logger.csv needs the package 'lerobot_hydra_no_such_package', which is not installed: install it "
        'with pip install -e ".[absent]" or leave logger.csv out of logger'
    )
    assert proc.returncode != 0 and error in proc.stderr.splitlines(), proc.stderr
    assert not (tmp_path / "episodes.jsonl").exists()  # nothing ran


@pytest.mark.parametrize("sink", ["wandb", "trackio"])
def test_wandb_and_trackio_are_refused_where_their_package_is_missing(compose: Callable, sink: str) -> None:
    import importlib.util

    node = compose(f"logger={sink}").logger
    missing = importlib.util.find_spec(sink) is None
    if missing and sink == "trackio" and sys.version_info < (3, 12):  # its extra installs nothing here: no pip hint
        with pytest.raises(UserError, match=r"^logger.trackio needs the package 'trackio', which needs Python >= 3.12"):
            build_loggers(node)
    elif missing:
        with pytest.raises(UserError, match=rf"^logger.{sink} needs the package '{sink}', which is not installed"):
            build_loggers(node)
    else:
        assert len(build_loggers(node)) == 1
