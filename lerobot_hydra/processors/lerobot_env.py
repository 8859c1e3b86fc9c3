"""The steps of a LeRobot env type (env=lerobot): the raw observation becomes what lerobot-eval hands a policy.

lerobot-eval converts each vector-env observation with `lerobot.envs.utils.preprocess_observation`, adds the
sub-envs' `task` texts and runs the env type's preprocessor (`EnvConfig.get_env_processors`, e.g. LIBERO's
`LiberoProcessorStep`); after the policy, the type's postprocessor sees `{"action": action}`. These steps do the
same, in that order, with LeRobot's own functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.processors.observation import RAW_KEY
from lerobot_hydra.processors.pipeline import Batch


def copied(tree: Any) -> Any:
    """The observation as fresh arrays, as a vector env returns it: LeRobot wraps arrays without copying, and a
    policy may keep its inputs across steps while the shared buffers are overwritten."""
    if isinstance(tree, dict):
        return {key: copied(value) for key, value in tree.items()}
    return np.array(tree, copy=True) if isinstance(tree, np.ndarray) else tree


@dataclass
class LeRobotEnvObservation:
    """`preprocess_observation`, the `task` texts, then the type's env preprocessor (a LeRobot pipeline)."""

    env_processor: Any

    def __call__(self, batch: Batch) -> Batch:
        from lerobot.envs.utils import preprocess_observation

        observation = preprocess_observation(copied(batch.pop(RAW_KEY)))
        observation["task"] = list(batch.pop("task", []))
        batch.update(self.env_processor(observation))
        return batch


@dataclass
class LeRobotEnvAction:
    """The type's env postprocessor on `{"action": action}` (identity for most types)."""

    env_processor: Any

    def __call__(self, batch: Batch) -> Batch:
        import torch

        action = batch["action"]
        if isinstance(action, np.ndarray):  # a native policy's action: LeRobot's pipelines take tensors
            action = torch.from_numpy(action)
        batch["action"] = self.env_processor({"action": action})["action"]
        return batch


# LeRobot env types whose observation LeRobot's XVLA LIBERO processors read (`robot_state` with eef pos and mat).
XVLA_ENV_TYPES = ("libero", "libero_plus")
# The 6D-rotation step reads an end-effector position (3), a 6D rotation (6) and a gripper (1).
XVLA_MIN_ACTION_DIM = 10


def check_xvla_env(env_type: str, policy_config: Any) -> None:
    """lerobot-eval gives an XVLA policy LeRobot's XVLA LIBERO env processors whatever the env; refuse what they
    cannot run, in one line, before any simulator starts."""
    if env_type not in XVLA_ENV_TYPES:
        raise UserError(
            f"env=lerobot env.type={env_type}: lerobot-eval gives an xvla policy LeRobot's LIBERO env processors "
            f"whatever the env, so env=lerobot runs xvla only with env.type=libero; for {env_type} use our own "
            "preset (e.g. env=pusht)"
        )
    action = (getattr(policy_config, "output_features", None) or {}).get("action")
    dim = int(action.shape[0]) if action is not None else 0
    if dim < XVLA_MIN_ACTION_DIM:
        raise UserError(
            f"an xvla policy on LIBERO outputs an end-effector position, a 6D rotation and a gripper "
            f"({XVLA_MIN_ACTION_DIM}+ dimensions, lerobot/xvla-libero's 20); this checkpoint outputs {dim}"
        )
