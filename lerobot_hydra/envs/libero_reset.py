"""robosuite's soft reset, made to start every LIBERO episode exactly where its hard reset starts it.

A hard reset (robosuite's default, and lerobot-eval's) rebuilds the task's model, simulator and renderer, about
3 s a reset on CPU; a soft reset keeps them and only resets the simulator's data. Three things still tell the two
apart, all replayed here before each soft reset:
- LIBERO places fixtures by writing the model's body poses, so the model keeps the last episode's placement;
- a freshly built simulator has run two forward passes at the model's initial pose (one when it is built, one when
  its renderer is made), and MuJoCo's constraint solver starts each pass from the previous one's accelerations,
  so without them later steps differ in the last bits and then more;
- each gripper model keeps the command it accumulated in the previous episode.
tests/envs/test_libero_reset.py checks the episodes bit for bit against hard resets, standard and LIBERO-PRO.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Forward passes a freshly built simulator has run before its first episode is placed (see above).
FRESH_FORWARD_PASSES = 2


def start_soft_resets_fresh(env: Any) -> None:
    """Makes every later reset of `env` (a robosuite env built with hard_reset=False) begin as a hard reset does."""
    import mujoco

    sim = env.sim
    compiled = mujoco.MjModel.from_xml_string(env.model.get_xml())
    body_pos, body_quat = compiled.body_pos.copy(), compiled.body_quat.copy()
    reset_data = sim.reset

    def reset_as_built() -> None:
        sim.model.body_pos[:] = body_pos
        sim.model.body_quat[:] = body_quat
        reset_data()
        for _ in range(FRESH_FORWARD_PASSES):
            sim.forward()
        for robot in env.robots:
            robot.gripper.current_action = np.zeros_like(robot.gripper.current_action)

    # robosuite's reset calls `sim.reset()` first thing; this simulator object lives as long as the env.
    sim.reset = reset_as_built
