"""What a vla-eval model server receives from each env, and how its actions are applied (docs/vla-eval.md).

LIBERO follows vla-eval 0.8.0's own LIBERO benchmark (`LIBEROBenchmark.make_obs` and `step`): the agentview
camera (and the wrist camera when the server asks `send_wrist_image`) turned upright by reversing both image axes,
the task's language, and with `send_state` the 8-D state (end-effector position, its orientation as an axis-angle
vector, the two finger joints); the action's gripper is made -1 (open) below zero, else +1 (close). MetaWorld and
PushT, which vla-eval does not run, get the convention defined here in the same shape.

A server's `observation_params` (its HELLO) ask for what vla-eval's benchmark would be constructed with: those the
env can honour are, one it cannot is refused in one line, and one vla-eval's LIBERO benchmark would not accept is
dropped with a warning, as vla-eval drops it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import EnvConfig
from lerobot_hydra.processors.observation import lerobot_key
from lerobot_hydra.serving.vla_eval.specs import IMAGE, LANGUAGE, Spec

log = logging.getLogger("lerobot_hydra")

LIBERO_SETTLE_STEPS = 10  # vla-eval's num_steps_wait, the settling steps of envs/libero_task.py
# Constructor parameters of vla-eval's LIBERO benchmark that only seed its simulator (`env.seed`): here every
# episode is seeded from (seed, task, episode index) and placed from its stored init state.
LIBERO_SEEDS = ("seed", "env_seed")
LIBERO_PARAMS = ("suite", "num_steps_wait", "send_wrist_image", "send_state", "absolute_action", "max_steps")


@dataclass
class Convention:
    """One env's side of the protocol: the specs it declares, what each row sends, how an action is applied."""

    env_name: str
    observation_spec: dict[str, Spec]
    action_spec: dict[str, Spec]
    action_dim: int
    reads: set[str] | None = None  # the env's observation keys the rows send (None: all)
    cameras: dict[str, str] = field(default_factory=dict)  # vla-eval's image name -> the env's raw key
    state_key: str | None = None  # the raw key of the state sent as `states`, or None

    def observation(self, raw: dict[str, Any], row: int, text: str) -> dict[str, Any]:
        images = {name: np.ascontiguousarray(raw[key][row]) for name, key in self.cameras.items()}
        observation: dict[str, Any] = {"images": images, "task_description": text}
        if self.state_key is not None:
            observation["states"] = np.asarray(raw[self.state_key][row])
        return observation

    def action(self, action: np.ndarray) -> np.ndarray:
        return action


def _flag(params: dict[str, Any], key: str) -> bool:
    return bool(params.get(key, False))


def _axis_angle_folded(quat: np.ndarray) -> np.ndarray:
    """vla-eval's default: the quaternion (x, y, z, w) taken with w >= 0, angle 2 acos(w), in float32."""
    q = -quat if quat[3] < 0 else quat.copy()
    w = float(np.clip(q[3], -1.0, 1.0))
    sin_half = np.sqrt(1.0 - w * w)
    if sin_half < 1e-8:
        return np.zeros(3, dtype=np.float32)
    return (q[:3] / sin_half * (2.0 * np.arccos(w))).astype(np.float32)


def _axis_angle_robosuite(quat: np.ndarray) -> np.ndarray:
    """With `quat_no_antipodal`: robosuite's conversion, w clipped to [-1, 1] and not folded, in float32."""
    q = quat.copy()
    q[3] = min(max(q[3], -1.0), 1.0)
    den = np.sqrt(1.0 - q[3] * q[3])
    if math.isclose(den, 0.0):
        return np.zeros(3, dtype=np.float32)
    return (q[:3] * 2.0 * math.acos(q[3]) / den).astype(np.float32)


@dataclass
class LiberoConvention(Convention):
    fold: bool = True  # vla-eval's default axis-angle; False: `quat_no_antipodal`

    def observation(self, raw: dict[str, Any], row: int, text: str) -> dict[str, Any]:
        images = {name: np.ascontiguousarray(raw[key][row][::-1, ::-1]) for name, key in self.cameras.items()}
        observation: dict[str, Any] = {"images": images, "task_description": text}
        if self.state_key is not None:
            robot = raw[self.state_key]
            quat = np.asarray(robot["eef_quat"][row], dtype=np.float64)
            axis_angle = _axis_angle_folded(quat) if self.fold else _axis_angle_robosuite(quat)
            observation["states"] = np.concatenate([robot["eef_pos"][row], axis_angle, robot["gripper_qpos"][row]])
        return observation

    def action(self, action: np.ndarray) -> np.ndarray:
        applied = np.array(action, dtype=np.float32)
        applied[-1] = -1.0 if action[-1] < 0 else 1.0
        return applied


def libero(env: Any, params: dict[str, Any]) -> LiberoConvention:
    wrist, state = _flag(params, "send_wrist_image"), _flag(params, "send_state")
    cameras = {"agentview": "agentview", **({"wrist": "robot0_eye_in_hand"} if wrist else {})}
    for camera in cameras.values():
        if camera not in env.cameras:
            raise UserError(f"the vla-eval model server reads LIBERO's {camera} camera; add it to env.camera_names")
    if state and env.obs_type != "pixels_agent_pos":
        raise UserError(
            "the vla-eval model server reads LIBERO's state (send_state); use env.obs_type=pixels_agent_pos"
        )
    absolute = env.control_mode == "absolute"
    if "absolute_action" in params and bool(params["absolute_action"]) != absolute:
        raise UserError(
            f"the vla-eval model server asks absolute_action={bool(params['absolute_action'])}, this env runs "
            f"env.control_mode={env.control_mode}; set env.control_mode={'relative' if absolute else 'absolute'}"
        )
    if params.get("num_steps_wait", LIBERO_SETTLE_STEPS) != LIBERO_SETTLE_STEPS:
        raise UserError(
            f"the vla-eval model server asks num_steps_wait={params['num_steps_wait']}; LIBERO here settles each "
            f"episode for {LIBERO_SETTLE_STEPS} steps, as vla-eval does by default"
        )
    for key in set(params) - {*LIBERO_PARAMS, *LIBERO_SEEDS, "quat_no_antipodal"}:
        log.warning(
            "the vla-eval model server's observation parameter %r is not LIBERO's: ignored, as vla-eval does", key
        )
    for key in {"suite", "max_steps"} & set(params):
        raise UserError(f"the vla-eval model server sets {key}; here env.task and env.episode_length choose it")
    observation_spec = {"agentview": Spec(0, IMAGE), "language": Spec(0, LANGUAGE)}
    observation_spec |= {"wrist": Spec(0, IMAGE)} if wrist else {}
    observation_spec |= {"state": Spec(8, "eef_pos3_axisangle3_gripper2")} if state else {}
    action_spec = {"position": Spec(3, "delta_xyz"), "rotation": Spec(3, "axis_angle")}
    action_spec["gripper"] = Spec(1, "binary_close_positive")
    reads = {lerobot_key(env.features_map, camera) for camera in cameras.values()}
    reads |= {lerobot_key(env.features_map, "state")} if state else set()
    state_key = "robot_state" if state else None
    return LiberoConvention(
        "LIBERO", observation_spec, action_spec, 7, reads, cameras, state_key, not _flag(params, "quat_no_antipodal")
    )


def _one_camera(env_name: str, params: dict[str, Any], pixels: bool, state: bool, hint: str) -> None:
    extra = set(params) - {"send_state", "send_wrist_image"}
    if _flag(params, "send_wrist_image") or extra:
        asked = "send_wrist_image" if _flag(params, "send_wrist_image") else ", ".join(sorted(extra))
        raise UserError(f"the vla-eval model server asks {asked}, which {env_name} here does not offer (one camera)")
    if not pixels or (_flag(params, "send_state") and not state):
        raise UserError(f"the vla-eval model server reads {env_name}'s camera image and state; {hint}")


def metaworld(env: Any, params: dict[str, Any]) -> Convention:
    state = _flag(params, "send_state")
    _one_camera(
        "MetaWorld",
        params,
        env.obs_type != "state",
        env.obs_type == "pixels_agent_pos",
        "use env.obs_type=pixels_agent_pos",
    )
    observation_spec = {env.camera_name: Spec(0, IMAGE), "language": Spec(0, LANGUAGE)}
    observation_spec |= {"state": Spec(4, "eef_pos3_gripper1")} if state else {}
    gripper = Spec(1, "continuous_close_positive", frozenset({"continuous_close_positive", "binary_close_positive"}))
    action_spec = {"position": Spec(3, "delta_xyz"), "gripper": gripper}
    reads = {lerobot_key(env.features_map, "pixels")} | (
        {lerobot_key(env.features_map, "agent_pos")} if state else set()
    )
    return Convention(
        "MetaWorld",
        observation_spec,
        action_spec,
        4,
        reads,
        {env.camera_name: "pixels"},
        "agent_pos" if state else None,
    )


def pusht(env: Any, params: dict[str, Any]) -> Convention:
    state = _flag(params, "send_state")
    obs_type = env.gym_kwargs.get("obs_type")
    _one_camera("PushT", params, obs_type == "pixels_agent_pos", True, "use env.gym_kwargs.obs_type=pixels_agent_pos")
    observation_spec = {"top": Spec(0, IMAGE), "language": Spec(0, LANGUAGE)}
    observation_spec |= {"state": Spec(2, "agent_xy_pixels")} if state else {}
    action_spec = {"position": Spec(2, "absolute_xy_pixels")}
    return Convention(
        "PushT", observation_spec, action_spec, 2, None, {"top": "pixels"}, "agent_pos" if state else None
    )


def convention_for(env: EnvConfig, params: dict[str, Any]) -> Convention:
    """The convention of `env` for a server that asked `params` (its `observation_params`)."""
    from lerobot_hydra.envs.libero import LiberoEnvConfig
    from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig
    from lerobot_hydra.envs.pusht import PushTEnvConfig

    if isinstance(env, LiberoEnvConfig):
        return libero(env, params)
    if isinstance(env, MetaWorldEnvConfig):
        return metaworld(env, params)
    if isinstance(env, PushTEnvConfig):
        return pusht(env, params)
    raise UserError(f"policy=vla_eval has conventions for env=libero, metaworld and pusht, not {env.display_name()}")
