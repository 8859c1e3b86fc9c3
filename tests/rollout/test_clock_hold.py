"""eval.clock.hold=noop: a row whose queue ran dry sends the env's no-op, an all-zero action, where the env has one.
LIBERO's and robosuite's zero action (an end-effector delta of 0, a gripper that moves by its action's sign) brings
the arm to rest where it is, checked on their simulators; a LIBERO run on the clock sends zeros at exactly its held
steps (recorded with eval.recording), where hold=repeat sends the last action again."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devkit.lerobot_checkpoints import tiny_act
from tests.conftest import run_here
from tests.helpers.sim_envs import robosuite_python
from tests.rollout.test_recording import load

MOVE = (0.5, -0.3, 0.4, 0.0, 0.0, 0.2, 1.0)  # moves the Panda's hand and closes its gripper
STEPS = 20


def at_rest(trail: list[Any], moving: list[Any]) -> None:
    """After 20 zero actions the hand has stopped (its last steps move it by less than 0.1 mm), where 20 more of
    `MOVE` keep it moving by more than 1 mm a step."""
    still = [float(np.linalg.norm(np.subtract(b, a))) for a, b in zip(trail, trail[1:], strict=False)]
    going = [float(np.linalg.norm(np.subtract(b, a))) for a, b in zip(moving, moving[1:], strict=False)]
    assert max(still[-5:]) < 1e-4 and min(going[-5:]) > 1e-3, (still, going)


@pytest.mark.libero
def test_a_zero_action_brings_a_libero_arm_to_rest_where_it_is() -> None:
    pytest.importorskip("libero", reason="needs the libero extra")
    from lerobot_hydra.envs.libero import LiberoEnvConfig

    config = LiberoEnvConfig(task="libero_spatial", task_ids=[0], observation_height=32, observation_width=32)
    assert config.zero_action_holds()
    env = config.build(config.tasks()[0], render=False)
    try:

        def hand(action: Any) -> list[Any]:
            return [env.step(np.array(action))[0]["robot_state"]["eef_pos"] for _ in range(STEPS)]

        env.reset(seed=1000, options={"episode_index": 0})
        hand(MOVE)
        trail = hand(np.zeros(7))
        at_rest(trail, hand(MOVE))
    finally:
        env.close()
    assert not LiberoEnvConfig(task="libero_spatial", control_mode="absolute").zero_action_holds()


# robosuite 1.5's Lift in its own environment: MOVE, then zeros, then MOVE, the hand's position after each step.
BY_HAND = """
import json, sys
import numpy as np, robosuite
env = robosuite.make("Lift", robots="Panda", has_renderer=False, has_offscreen_renderer=False, use_camera_obs=False,
                     ignore_done=True, seed=0)
env.reset()
steps = int(sys.argv[1])
trail = [env.step(np.array(a))[0]["robot0_eef_pos"].tolist() for a in json.loads(sys.argv[2]) for _ in range(steps)]
print(json.dumps(trail))
"""


def test_a_zero_action_brings_a_robosuite_arm_to_rest_where_it_is() -> None:
    from lerobot_hydra.envs.robosuite import RobosuiteEnvConfig

    assert RobosuiteEnvConfig().zero_action_holds() and not RobosuiteEnvConfig(robots="Jaco").zero_action_holds()
    actions = json.dumps([MOVE, [0.0] * 7, MOVE])
    out = subprocess.run(
        [robosuite_python(), "-c", BY_HAND, str(STEPS), actions], capture_output=True, text=True, check=True
    )
    trail = json.loads(out.stdout.strip().splitlines()[-1])
    at_rest(trail[STEPS : 2 * STEPS], trail[2 * STEPS :])


LIBERO_ACT = {"observation.images.image": ("VISUAL", (3, 32, 32)), "observation.state": ("STATE", (8,))}
# 160 ms at LIBERO's 20 fps: 4 steps; a chunk of 4 asked for only once the queue is empty: every chunk, 4 held steps.
CLOCK = ["eval.clock.mode=modeled", "eval.clock.latency_ms=160", "eval.clock.chunk_size_threshold=0"]


@pytest.mark.libero
def test_held_steps_send_the_no_op_with_hold_noop_and_the_last_action_with_repeat(tmp_path: Path) -> None:
    pytest.importorskip("libero", reason="needs the libero extra")
    path = tiny_act(tmp_path / "act", LIBERO_ACT, (7, 0.0, 0.3), n_action_steps=4, chunk_size=4)
    common = [
        "env=libero",
        "env.task=libero_spatial",
        "env.task_ids=[0]",
        "env.episode_length=16",
        "env.observation_height=32",
        "env.observation_width=32",
        "policy=act",
        f"policy.path={path}",
        "device=cpu",
        "eval.n_episodes=1",
        "eval.batch_size=1",
        "eval.recording=robot_state/eef_pos",
        *CLOCK,
    ]
    sent = {}
    for hold in ("noop", "repeat"):
        info = run_here(*common, f"eval.clock.hold={hold}", out_dir=tmp_path / hold)
        (record,) = info["episodes"]
        dataset = load(tmp_path / hold / "recording" / "part-000")
        actions = np.stack([np.asarray(dataset[i]["action"]) for i in range(len(dataset))])
        assert len(actions) == record["steps"] == 16 and record["held_steps"] == 4 * (record["inferences"] - 1) > 0
        sent[hold] = (actions, record["held_steps"])
    noop, held = sent["noop"]
    zero = [i for i, action in enumerate(noop) if not action.any()]
    assert len(zero) == held and zero[:4] == [4, 5, 6, 7]  # the first chunk's 4 actions, then 4 held steps
    repeat, _ = sent["repeat"]
    assert not any(not action.any() for action in repeat)
    assert all(np.array_equal(repeat[i], repeat[3]) for i in zero[:4])
