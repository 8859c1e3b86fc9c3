"""A real sweep over eval.clock.latency_ms gives a latency curve (docs/timing.md): success against latency, each
latency paired against the 0 ms arm, in sweep_summary.json, the console, the exports, the report page, its plot and
the sweep's W&B run."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.conftest import read_json, run_eval

# MetaWorld's experts planning chunks of 6 actions (75 ms at 80 fps); pick-place fails when its plans go stale.
CURVE = ["policy=metaworld_expert", "policy.chunk=6", "env.task=[pick-place-v3,reach-v3]", "env.episode_length=80"]
CURVE += ["eval.n_episodes=3", "eval.batch_size=3", "eval.use_async_envs=false", "device=cpu"]
CURVE += ["eval.clock.mode=modeled", "eval.clock.latency_ms=0,150,300"]


def test_a_sweep_over_latency_gives_a_paired_latency_curve_everywhere(tmp_path: Path) -> None:
    from tests.loggers.test_wandb import logged, offline_runs

    sweep = tmp_path / "sweep"
    proc = run_eval(*CURVE, "logger=wandb", "logger.wandb.mode=offline", out_dir=sweep, multirun=True)
    summary = read_json(sweep / "sweep_summary.json")
    (curve,) = summary["latency_curves"]
    points = curve["points"]
    assert curve["series"] == "" and curve["reference"] == "eval.clock.latency_ms=0"
    assert [p["latency_ms"] for p in points] == [0.0, 150.0, 300.0]
    rows = {r["arm"]: r for r in summary["combinations"]}
    compared = {c["candidate"]: c["overall"] for c in summary["comparisons"]}
    for point in points:
        assert point["pc_success"] == rows[point["arm"]]["pc_success"]
        assert point["inference_ms_p50"] == pytest.approx(point["latency_ms"])  # the modeled latency, charged
    assert points[0]["diff_pc"] is None and points[0]["mean_held_steps"] == 0
    for point in points[1:]:  # the same paired comparison as the sweep's, against the 0 ms arm
        assert point["paired"] and point["diff_pc"] == compared[point["arm"]]["diff_pc"]
        assert point["ci95_diff_pc"] == compared[point["arm"]]["ci95_diff_pc"]
        assert point["mean_held_steps"] > 0
    assert points[-1]["diff_pc"] < 0  # stale plans cost pick-place its successes
    assert "Latency curve" in proc.stdout and f"Latency curve: {sweep / 'latency_curve.png'}" in proc.stdout
    # The exports, the plot and the report page.
    with (sweep / "latency_curve.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [float(r["latency (ms)"]) for r in table] == [0.0, 150.0, 300.0]
    assert float(table[-1]["difference vs reference"]) == pytest.approx(points[-1]["diff_pc"])
    assert "Latency curve" in (sweep / "sweep_summary.md").read_text()
    assert (sweep / "latency_curve.png").stat().st_size > 5000
    page = (sweep / "report.html").read_text()
    assert '<img alt="latency_curve"' in page and "<h2>Latency curve</h2>" in page
    # The sweep's W&B run: each point's metrics, the table and the plot.
    (run,) = [r for r in offline_runs(sweep) if r["job_type"] == "sweep"]
    assert run["summary"]["latency/all/300/diff_pc"] == pytest.approx(points[-1]["diff_pc"])
    assert run["summary"]["latency/all/0/pc_success"] == pytest.approx(points[0]["pc_success"])
    assert logged(run, "media/table/latency_curve", ".table.json")
    assert logged(run, "media/images/plots/latency_curve", ".png")
