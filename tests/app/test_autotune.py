"""Autotune: the recommendation logic on known measurements, and a real probe of MetaWorld."""

from __future__ import annotations

import subprocess
import sys

from lerobot_hydra.app import autotune
from lerobot_hydra.app.autotune import Probe, candidate_batch_sizes, recommend
from tests.conftest import ROOT


def test_smallest_batch_within_reach_of_the_best_is_chosen() -> None:
    probes = [Probe(1, 0.010, 0.001, None, 100), Probe(2, 0.011, 0.001, None, 100), Probe(4, 0.021, 0.001, None, 100)]
    rec = recommend(probes, cpus=2, gpus=0, n_tasks=10, gl="osmesa", device="cpu")
    assert rec.batch_size == 2  # batch 4 is barely faster than 2 on two cores
    assert rec.max_parallel_tasks == 1 and rec.shards_per_node == 1 and rec.mujoco_gl == "osmesa"
    assert len(rec.reasons) == 4 and all(r.strip() for r in rec.reasons)


def test_in_process_envs_leave_cpus_to_more_shards() -> None:
    # Batch 1 (in process, no workers) beats batch 2 on two busy cores: one CPU a shard, two shards.
    probes = [Probe(1, 0.010, 0.001, None, 100), Probe(2, 0.024, 0.001, None, 100)]
    rec = recommend(probes, cpus=2, gpus=0, n_tasks=2, gl="osmesa", device="cpu")
    assert rec.batch_size == 1 and rec.max_parallel_tasks == 1 and rec.shards_per_node == 2
    assert "workers" not in rec.reasons[2] and rec.reasons[2].startswith("shards per node: 2: ")


def test_a_gpu_bound_policy_gets_parallel_tasks_and_one_shard_per_gpu() -> None:
    probes = [Probe(8, 0.010, 0.030, 0.08, 300)]
    rec = recommend(probes, cpus=64, gpus=4, n_tasks=40, gl="egl", device="cuda")
    assert rec.batch_size == 8
    assert rec.max_parallel_tasks == 4  # policy takes 75% of a step: 1 / (1 - 0.75) lanes keep the GPU busy
    assert rec.shards_per_node == 4 and rec.mujoco_gl == "egl"
    assert "ms per sub-env" in rec.reasons[-1]


def test_batch_candidates_respect_cpus_and_episode_count() -> None:
    assert candidate_batch_sizes(2, 10) == [1, 2, 4]
    assert candidate_batch_sizes(8, 5) == [1, 2, 4, 5]
    assert candidate_batch_sizes(16, 1) == [1]


def test_autotune_probes_metaworld_and_prints_a_paste_ready_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "lerobot_hydra.app.autotune", "env.task=[reach-v3,push-v3]", "eval.n_episodes=4"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for b in (1, 2, 4):
        assert f"batch {b:>3}: env step" in out
    command = [line for line in out.splitlines() if line.startswith("MUJOCO_GL=")]
    assert len(command) == 1 and "python eval.py" in command[0] and "eval.batch_size=" in command[0]
    assert "'env.task=[reach-v3,push-v3]'" in command[0]


def test_autotune_reports_bad_overrides_in_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "lerobot_hydra.app.autotune", "env=nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: unknown env 'nope'") and len(proc.stderr.strip().splitlines()) == 1


def test_autotune_times_at_least_one_step_of_a_one_step_episode() -> None:
    overrides = ["env.task=reach-v3", "env.episode_length=1", "eval.n_episodes=1", "eval.max_episodes_rendered=0"]
    rec = autotune.run(overrides)
    assert rec.batch_size == 1 and rec.max_parallel_tasks == 1
