"""X-VLA on LIBERO as lerobot-eval 0.6 runs it: lerobot-eval gives every XVLA policy LeRobot's XVLA LIBERO env
processors (a 20-D ee6d state from the controller's orientation matrix, only the agentview camera turned upright,
ImageNet normalization, a domain id, and a 6D-rotation-to-axis-angle action step). `env=lerobot env.type=libero`
applies them (`EnvConfig.for_policy`); our own LIBERO presets refuse xvla. Checked against the real lerobot-eval
with a tiny checkpoint of lerobot/xvla-libero's interface (tests/helpers/tiny_xvla.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from lerobot_hydra.policies.lerobot.versions import lerobot_version
from tests.conftest import ROOT, outcome, read_episodes, run_eval
from tests.helpers.lerobot_cli import run_lerobot_eval

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.libero]

SIZE, STEPS, EPISODES = 64, 6, 2  # 6 steps: a second chunk (n_action_steps 4) after the arm moved
TASK = ["env.task=libero_spatial", "env.task_ids=[0]", f"env.episode_length={STEPS}"]
IMAGES = [f"env.observation_height={SIZE}", f"env.observation_width={SIZE}"]


def lerobot_06() -> None:
    if int(lerobot_version().split(".")[1]) < 6:
        pytest.skip("tiny xvla builds and lerobot-eval's XVLA LIBERO processors need LeRobot 0.6")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lerobot_06()
    from tests.helpers.tiny_xvla import tiny_xvla_libero

    return tiny_xvla_libero(tmp_path_factory.mktemp("xvla") / "xvla_libero", SIZE, tap=True)


@pytest.mark.parametrize("env", ["libero", "libero_lerobot"])
def test_our_libero_presets_refuse_xvla_naming_the_one_that_runs_it(checkpoint: Path, env: str) -> None:
    proc = run_eval(f"env={env}", *TASK, "policy=xvla", f"policy.path={checkpoint}", "device=cpu", check=False)
    assert proc.returncode != 0
    assert "use env=lerobot env.type=libero" in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr


def test_env_lerobot_runs_xvla_only_on_libero(checkpoint: Path) -> None:
    proc = run_eval("env=lerobot", "env.type=pusht", "policy=xvla", f"policy.path={checkpoint}", check=False)
    assert proc.returncode != 0
    assert "runs xvla only with env.type=libero" in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_xvla_on_libero_gets_what_lerobot_eval_hands_it_step_by_step(checkpoint: Path, tmp_path: Path) -> None:
    """The same checkpoint and seeds: eval.py (env=lerobot env.type=libero) hands the policy what lerobot-eval
    hands it, bit for bit, at every step of both episodes, and the episodes end alike. XVLA's noise has no per-row
    hook, so lerobot_hydra runs it one row at a time from a generator seeded by the episode; lerobot-eval runs one
    env per rollout with torch's generator seeded the same way (tests/helpers/lerobot_eval_rows.py), so the second
    chunk, drawn after the arm moved, is the same noise too."""
    pytest.importorskip("libero")
    from lerobot_hydra.envs.libero_setup import prepare_libero
    from tests.helpers.lerobot_tap import TAP_ENV, tapped_calls
    from tests.lerobot.test_lerobot_eval_parity import libero_with_its_assets

    one_thread = {"OMP_NUM_THREADS": "1"}
    run_eval(
        "env=lerobot", "env.type=libero", *TASK, *IMAGES, "policy=xvla", f"policy.path={checkpoint}",
        "policy.overrides=null", "device=cpu", f"eval.n_episodes={EPISODES}", "eval.batch_size=1",
        "eval.max_episodes_rendered=0",
        out_dir=tmp_path / "ours", env={**one_thread, TAP_ENV: str(tmp_path / "tap_ours")}, timeout=900,
    )  # fmt: skip
    overlay = libero_with_its_assets(tmp_path)
    path = os.pathsep.join(str(p) for p in (overlay, ROOT, os.environ.get("PYTHONPATH")) if p)
    theirs = run_lerobot_eval(
        f"--policy.path={checkpoint}", "--policy.device=cpu", "--env.type=libero",
        *(f"--{setting}" for setting in TASK + IMAGES), f"--eval.n_episodes={EPISODES}", "--eval.batch_size=1",
        "--eval.use_async_envs=false", "--seed=1000",
        output_dir=tmp_path / "theirs",
        env={**one_thread, TAP_ENV: str(tmp_path / "tap_theirs"), "PYTHONPATH": path,
             "LIBERO_CONFIG_PATH": str(prepare_libero())},
        command=[sys.executable, "-m", "tests.helpers.lerobot_eval_rows"],
    )  # fmt: skip
    mine, their_calls = tapped_calls(tmp_path / "tap_ours"), tapped_calls(tmp_path / "tap_theirs")
    assert len(mine) == len(their_calls) == STEPS * EPISODES
    keys = ("observation.images.image", "observation.images.image2", "observation.state")
    for step, (ours, them) in enumerate(zip(mine, their_calls, strict=True)):
        assert set(ours) == set(them) == set(keys), step
        for key in keys:
            np.testing.assert_array_equal(ours[key], them[key], err_msg=f"call {step}, {key}")
    states = [call["observation.state"][0] for call in mine]
    assert states[0].shape == (20,) and not states[0][10:].any()  # LeRobot's ee6d state: pos, 6D rotation, zeros
    assert np.abs(states[STEPS - 1] - states[0]).max() > 1e-2  # the arm moved (the 7-D actions reached LIBERO)
    assert not np.array_equal(states[0], states[STEPS])  # two init states
    assert mine[0]["observation.images.image"].min() < 0  # ImageNet-normalized before the policy's preprocessor
    records = sorted(read_episodes(tmp_path / "ours"), key=lambda r: r["episode_index"])
    assert [(r["init_state_id"], r["steps"]) for r in records] == [(i, STEPS) for i in range(EPISODES)]
    assert [r["sum_reward"] for r in records] == theirs
    assert len({outcome(r) for r in records}) == EPISODES
