"""`env.python` composed with the other run modes (docs/simulator-envs.md, "What composes with it"): recording,
dynamic claims (also on SLURM and Ray), the policy server, cameras drawn only on the steps the policy reads, with
videos, and error episodes. Each runs its simulators (MetaWorld's; the counting env's for error episodes) in the
`metaworld-mujoco-3.3.0` environment (the base's own versions), so its episodes must equal those of the same run
with in-family workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import read_json, run_eval, run_here
from tests.helpers.sim_envs import metaworld_python
from tests.run.test_mode_pairs import recorded_episodes, same_episodes
from tests.sweeps.test_sharding import slurm  # noqa: F401  (the fixture that starts the local cluster)

STATE = [
    "env.task=[reach-v3,push-v3]",
    "env.obs_type=state",
    "env.episode_length=20",
    "eval.batch_size=2",
    "eval.max_episodes_rendered=0",
    "device=cpu",
]


def foreign() -> str:
    return f"env.python={metaworld_python('3.3.0')}"


@pytest.mark.lerobot
def test_recording_with_simulators_in_another_environment(tmp_path: Path) -> None:
    overrides = [*STATE, "policy=random", "eval.n_episodes=2"]
    plain = run_here(*overrides, out_dir=tmp_path / "plain")
    info = run_here(*overrides, "eval.recording=all", foreign(), out_dir=tmp_path / "run")
    same_episodes(info["episodes"], plain["episodes"])
    assert info["provenance"]["simulator"]["packages"]["mujoco"] == "3.3.0"
    recorded_episodes([tmp_path / "run"], tmp_path / "joined", info["episodes"])


DYNAMIC = [*STATE, "policy=random", "eval.n_episodes=10", "env.episode_length=10"]


def dynamic_sweep(tmp_path: Path, *launcher: str) -> Path:
    """Two shards claiming blocks of one queue; 10 episodes a task, so the first blocks hold 2 (workers)."""
    plain = run_here(*DYNAMIC, out_dir=tmp_path / "plain")
    sweep = tmp_path / "sweep"
    shards = ["eval.claims=dynamic", "eval.shard_id=0,1", *launcher]
    run_eval(*DYNAMIC, *shards, foreign(), out_dir=sweep, multirun=True, timeout=420)
    merged = read_json(sweep / "eval_info.json")
    same_episodes(merged["episodes"], plain["episodes"])
    assert len(merged["episodes"]) == 20
    assert merged["provenance"]["simulator"]["packages"]["mujoco"] == "3.3.0"
    return sweep


def test_dynamic_claims_with_simulators_in_another_environment(tmp_path: Path) -> None:
    dynamic_sweep(tmp_path)


@pytest.mark.slurm
def test_dynamic_claims_on_slurm_with_simulators_in_another_environment(
    slurm: None,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Each shard a SLURM job on the local cluster, its workers started from env.python there."""
    sweep = dynamic_sweep(tmp_path, "hydra/launcher=submitit_slurm")
    assert len(list((sweep / ".submitit").glob("*_[0-1]"))) == 2, "one SLURM job per shard"


@pytest.mark.ray
def test_dynamic_claims_on_ray_with_simulators_in_another_environment(ray_head: Any, tmp_path: Path) -> None:
    """Each shard a task of the session's local Ray head, its workers started from env.python there."""
    from tests.sweeps.test_ray import on_ray

    dynamic_sweep(tmp_path, *on_ray(ray_head))


@pytest.mark.lerobot
def test_a_served_policy_drives_simulators_in_another_environment(tmp_path: Path) -> None:
    from devkit.lerobot_checkpoints import tiny_act
    from tests.serving.test_policy_server import served

    act = ["policy=act", f"policy.path={tiny_act(tmp_path / 'act')}"]
    overrides = [*STATE, "eval.n_episodes=2"]
    plain = run_here(*overrides, *act, out_dir=tmp_path / "plain")
    with served(tmp_path, *act, "serve.shards=1", env=[*STATE[:3], "device=cpu"]) as (server, announce):
        remote = ["policy=remote", f"policy.url={announce}", "policy.connect_timeout_s=30"]
        info = run_here(*overrides, *remote, foreign(), out_dir=tmp_path / "run")
        assert server.stopped.wait(30) and server.stats.snapshot()["clients_done"] == 1
    same_episodes(info["episodes"], plain["episodes"])
    assert len(info["episodes"]) == 4


@pytest.mark.lerobot
def test_pixels_drawn_only_when_read_and_filmed_with_simulators_in_another_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MetaWorld pixels, a tiny ACT (chunks of 8) tapped: the foreign workers draw the camera exactly on the steps
    the policy reads, and the episodes and filmed frames equal those of in-family workers drawing every step."""
    from devkit.lerobot_checkpoints import tiny_act
    from tests.helpers.lerobot_tap import ObservationTap
    from tests.rollout.test_render_read import (
        ACTION,
        METAWORLD,
        METAWORLD_IMAGE,
        SIZE,
        assert_same_runs,
        drawn,
        evaluated,
        read_steps,
    )

    features = {METAWORLD_IMAGE: ("VISUAL", (3, SIZE, SIZE)), "observation.state": ("STATE", (4,))}
    path = tiny_act(tmp_path / "act", features, ACTION["metaworld"], first_steps=(ObservationTap(),))
    run = (*METAWORLD, "eval.use_async_envs=true", "policy=act", f"policy.path={path}")
    every, _ = evaluated(tmp_path, "every", monkeypatch, *run, "eval.render=every_step")
    read, calls = evaluated(tmp_path, "read", monkeypatch, *run, foreign())
    assert_same_runs(tmp_path / "read", tmp_path / "every", read, every)
    assert drawn(calls, METAWORLD_IMAGE) == [[w, w] for w in read_steps(17, 8, 1)]
    assert read_json(tmp_path / "read" / "eval_info.json")["provenance"]["simulator"]["python"]
    assert np.asarray(calls[0][METAWORLD_IMAGE]).shape[-2:] == (SIZE, SIZE)


def test_an_error_episode_with_simulators_in_another_environment(tmp_path: Path) -> None:
    """The counting env's episode 3 of task 0 raises twice in the foreign worker: it is retried once in a fresh
    worker, then recorded as an error episode; every other episode equals the run without env.python."""
    from tests.helpers.counting_env import CountingEnvConfig
    from tests.rollout.test_error_episodes import FAULT_LINE, undisturbed, without_wall_time
    from tests.rollout.test_vector import run

    cfg = CountingEnvConfig(log_dir=str(tmp_path), n_tasks=2, fault="raise", fault_episode=3, fault_times=10)
    cfg.python = metaworld_python("3.3.0")
    records = without_wall_time(run(cfg, n_episodes=5, batch=2, use_async=True))
    errored = [r for r in records if r.errored]
    assert [(r.unit, r.error, r.error_step, r.success) for r in errored] == [(("count", 0, 3), FAULT_LINE, 1, False)]
    clean = undisturbed(tmp_path, 5, True)
    assert [r for r in records if not r.errored] == [r for r in clean if r.unit != ("count", 0, 3)]


@pytest.mark.slow
@pytest.mark.libero
def test_libero_soft_resets_in_another_environment(tmp_path: Path) -> None:
    """One LIBERO task, three episodes in one foreign worker: the later two start by a soft reset of the simulator
    that worker keeps (envs/libero_reset.py), and all three equal those of this interpreter."""
    overrides = ["env=libero", "policy=random", "env.task=libero_spatial", "env.task_ids=[0]", "env.episode_length=8"]
    overrides += ["env.observation_height=64", "env.observation_width=64", "eval.n_episodes=3", "eval.batch_size=1"]
    plain = run_here(*overrides, "eval.max_episodes_rendered=0", out_dir=tmp_path / "plain")
    info = run_here(*overrides, "eval.max_episodes_rendered=0", foreign(), out_dir=tmp_path / "run")
    same_episodes(info["episodes"], plain["episodes"])
    assert len(info["episodes"]) == 3 and info["provenance"]["simulator"]["packages"]["robosuite"] == "1.4.0"
