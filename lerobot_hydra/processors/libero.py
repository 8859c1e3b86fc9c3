"""LIBERO's raw observation -> what LeRobot's LIBERO policies were trained on.

Cameras come out of LIBERO rotated by 180 degrees; the policies' datasets hold them upright. The state is
8-D: end-effector position (3), end-effector orientation as an axis-angle vector (3) and the two gripper
finger joint positions (2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import split_names
from lerobot_hydra.processors.observation import RAW_KEY
from lerobot_hydra.processors.pipeline import Batch

# Below this norm of the quaternion's vector part the rotation is the identity (or a full turn): zero vector.
ZERO_ROTATION_EPS = 1e-8
# exact: float64 atan2 (below); lerobot: the arithmetic of LeRobot's LIBERO processor, as lerobot-eval computes it.
AXIS_ANGLE_MODES = ("exact", "lerobot")


def quat_to_axis_angle(quat: np.ndarray) -> np.ndarray:
    """(..., 4) quaternions in (x, y, z, w) order -> (..., 3) rotation vectors (unit axis times angle).

    angle = 2 * atan2(|v|, w) with v = (x, y, z), which equals 2 * acos(w) for a unit quaternion but keeps
    full precision near the identity (where 1 - w^2 cancels) and does not need the input normalised.
    The angle lies in [0, 2*pi]: q and -q are not folded onto one another. LIBERO's datasets were recorded
    that way, and it keeps the vector continuous around LIBERO's gripper-down pose, whose w hovers around 0
    (folding would flip the vector from about (pi, 0, 0) to (-pi, 0, 0) as w changes sign).
    """
    quat = np.asarray(quat, dtype=np.float64)
    vector, w = quat[..., :3], quat[..., 3]
    norm = np.linalg.norm(vector, axis=-1)
    angle = 2.0 * np.arctan2(norm, w)
    rotating = norm > ZERO_ROTATION_EPS
    scale = np.divide(angle, norm, out=np.zeros_like(norm), where=rotating)
    return vector * scale[..., None]


def quat_to_axis_angle_lerobot(quat: np.ndarray) -> np.ndarray:
    """LeRobot 0.6's conversion, in torch float32 so its kernels round as lerobot-eval's do: angle = 2 acos(w),
    axis = v / sqrt(1 - w^2) (zero below 1e-10). It loses precision near the identity; `exact` does not."""
    import torch

    q = torch.as_tensor(np.asarray(quat), dtype=torch.float32).reshape(-1, 4)
    w = q[:, 3].clamp(-1.0, 1.0)
    den = torch.sqrt(torch.clamp(1.0 - w * w, min=0.0))
    out = torch.zeros((q.shape[0], 3), dtype=torch.float32)
    rotating = den > 1e-10
    out[rotating] = q[rotating, :3] / den[rotating].unsqueeze(1) * (2.0 * torch.acos(w[rotating])).unsqueeze(1)
    return out.numpy().reshape(*np.shape(quat)[:-1], 3)


@dataclass
class LiberoObservation:
    """Rotates every camera image by 180 degrees and replaces `robot_state` with the 8-D `state`; cameras
    absent from the observation (not read, so not rendered) are skipped.

    Runs on the raw (numpy, batch-first) observation, before `MapObservationKeys` names the keys.
    """

    camera_names: Any = field(default_factory=lambda: ["agentview", "robot0_eye_in_hand"])
    # How the orientation becomes an axis-angle vector: exact, or lerobot (env=libero_lerobot sets it).
    axis_angle: str = "exact"

    def __post_init__(self) -> None:
        if self.axis_angle not in AXIS_ANGLE_MODES:
            raise UserError(f"axis_angle must be one of {', '.join(AXIS_ANGLE_MODES)}, got {self.axis_angle!r}")

    def __call__(self, batch: Batch) -> Batch:
        raw = dict(batch[RAW_KEY])
        for camera in split_names(self.camera_names):
            if camera in raw:  # a camera the policy does not read is not rendered (EnvConfig.observing)
                # (..., H, W, C): reversing both image axes is a 180-degree rotation.
                raw[camera] = np.flip(raw[camera], axis=(-3, -2))
        robot_state = raw.pop("robot_state", None)
        if robot_state is not None:
            raw["state"] = np.concatenate(
                [robot_state["eef_pos"], self._axis_angle(robot_state["eef_quat"]), robot_state["gripper_qpos"]],
                axis=-1,
            ).astype(np.float32)
        batch[RAW_KEY] = raw
        return batch

    def _axis_angle(self, quat: np.ndarray) -> np.ndarray:
        return quat_to_axis_angle_lerobot(quat) if self.axis_angle == "lerobot" else quat_to_axis_angle(quat)
