"""robosuite 1.5's own single-arm manipulation tasks (Lift, Stack, Door, ...), a Panda under its default controller.

LIBERO pins robosuite 1.4, so these usually run in an environment of their own (`env.python`, made by
`bash scripts/sim_env.sh robosuite DIR`; docs/simulator-envs.md). What only a built simulator knows (the state's
and action's sizes of a task) is asked of the simulator side once per process (`simulator_facts`), so the policy
side never imports robosuite.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError, did_you_mean
from lerobot_hydra.envs.base import EnvConfig, TaskEnv, TaskSpec, split_names, state_unless_pixels_read

OBS_TYPES = ("state", "pixels_agent_pos")
DEFAULT_EPISODE_LENGTH = 500
GROUP = "robosuite"
# robosuite 1.5's tasks need mujoco<4 here (`suite.make` fails under MuJoCo 4.0.1).
MUJOCO_MAJOR_LIMIT = 4
MAKE_ONE = (
    "make an environment for it (bash scripts/sim_env.sh robosuite .venvs/robosuite) "
    "and set env.python=.venvs/robosuite/bin/python"
)
DESCRIPTIONS = {
    "Lift": "lift the cube",
    "Stack": "stack the red cube on the green cube",
    "Door": "open the door",
    "PickPlaceCan": "place the can into its bin",
    "NutAssemblySquare": "fit the square nut onto its peg",
}


@dataclass
class RobosuiteEnvConfig(EnvConfig):
    task: Any = "Lift"
    robots: str = "Panda"
    obs_type: str = "state"
    camera_name: str = "agentview"
    observation_height: int = 84
    observation_width: int = 84
    # robosuite's staged dense reward (reward_shaping); false: 1 on success, else 0.
    dense_reward: bool = True
    fps: int = 20  # robosuite's control frequency

    def __post_init__(self) -> None:
        if self.obs_type not in OBS_TYPES:
            raise UserError(f"env.obs_type must be one of {', '.join(OBS_TYPES)}, got '{self.obs_type}'")
        self.check_features_map()

    def raw_observation_keys(self) -> tuple[str, ...]:
        return ("agent_pos", "environment_state", "pixels")

    def tasks(self) -> list[TaskSpec]:
        names = split_names(self.task, "env.task")
        if not names:
            raise UserError("env.task names no robosuite task; give one or more, e.g. env.task=[Lift,Door]")
        limit = self.episode_length or DEFAULT_EPISODE_LENGTH
        return [
            TaskSpec(task_group=GROUP, task_id=i, name=name, description=DESCRIPTIONS.get(name, name), max_steps=limit)
            for i, name in enumerate(names)
        ]

    def spaces(self, task: TaskSpec) -> tuple[Any, Any]:
        from lerobot_hydra.vector.interpreter import simulator_facts

        return _spaces(self, simulator_facts(self, task))

    def measure(self, task: TaskSpec) -> dict[str, Any]:
        env = _make(self, task.name, cameras=False)
        try:
            return _sizes(env)
        finally:
            env.close()

    def zero_action_holds(self) -> bool:
        # The Panda's default controller takes end-effector deltas and its gripper moves by the action's sign; other
        # robots' hands (GR1's, Jaco's) take positions.
        return self.robots == "Panda"

    def build(self, task: TaskSpec, render: bool) -> TaskEnv:
        return RobosuiteTaskEnv(self, task, render)

    def display_name(self) -> str:
        return "robosuite"

    def without_unread(self, reads: set[str]) -> RobosuiteEnvConfig:
        return state_unless_pixels_read(self, reads)

    def distributions(self) -> list[str]:
        return ["robosuite"]

    def check_simulator(self, packages: dict[str, str | None], where: str) -> None:
        found, mujoco = packages.get("robosuite") or "", packages.get("mujoco") or ""
        if _major_minor(found) < (1, 5):
            raise UserError(f"{where} robosuite {found}, and env=robosuite needs robosuite 1.5; {MAKE_ONE}")
        if _major_minor(mujoco)[0] >= MUJOCO_MAJOR_LIMIT:
            raise UserError(
                f"{where} mujoco {mujoco}, under which robosuite {found}'s tasks fail to build; use mujoco<4 "
                "(bash scripts/sim_env.sh robosuite installs mujoco==3.5.0)"
            )


def _spaces(config: RobosuiteEnvConfig, sizes: dict[str, Any]) -> tuple[Any, Any]:
    from gymnasium import spaces

    parts: dict[str, spaces.Space] = {
        "agent_pos": spaces.Box(-np.inf, np.inf, (int(sizes["agent_pos"]),), np.float64),
        "environment_state": spaces.Box(-np.inf, np.inf, (int(sizes["environment_state"]),), np.float64),
    }
    if config.obs_type == "pixels_agent_pos":
        parts["pixels"] = spaces.Box(0, 255, (config.observation_height, config.observation_width, 3), np.uint8)
    return spaces.Dict(parts), spaces.Box(-1.0, 1.0, (int(sizes["action"]),), np.float32)


def _sizes(env: Any) -> dict[str, int]:
    """The sizes of a built task's robot state, object state and action."""
    obs = env.observation_spec()
    low, _ = env.action_spec
    return {
        "agent_pos": int(obs["robot0_proprio-state"].shape[0]),
        "environment_state": int(obs["object-state"].shape[0]),
        "action": int(np.asarray(low).shape[0]),
    }


def _major_minor(text: str) -> tuple[int, int]:
    parts = [int(p) if p.isdigit() else 0 for p in text.split(".")[:2]] + [0, 0]
    return parts[0], parts[1]


class _ErrorsOnly(logging.Filter):
    """robosuite warns at import of a missing macro file and optional robots, and logs a line at every reset."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


def _make(config: RobosuiteEnvConfig, name: str, cameras: bool, render: bool = False) -> Any:
    """robosuite's env for task `name`, episodes cut by the rollout (never by robosuite's horizon)."""
    from lerobot_hydra.core.gl import configure_mujoco_gl

    configure_mujoco_gl()  # robosuite picks its GL backend at import
    try:
        robosuite_version = version("robosuite")
    except PackageNotFoundError:
        robosuite_version = "none"
    where = f"env.python={config.python} has" if config.python else "this interpreter has"
    config.check_simulator({"robosuite": robosuite_version, "mujoco": version("mujoco")}, where)
    logger = logging.getLogger("robosuite_logs")
    if not any(isinstance(f, _ErrorsOnly) for f in logger.filters):
        logger.addFilter(_ErrorsOnly())  # robosuite sets its level at import: a filter outlives that
    import robosuite

    if name not in robosuite.ALL_ENVIRONMENTS:
        known = ", ".join(sorted(robosuite.ALL_ENVIRONMENTS))
        hint = did_you_mean(name, sorted(robosuite.ALL_ENVIRONMENTS))
        raise UserError(f"env.task: robosuite has no task '{name}'{hint}; its tasks: {known}")
    try:
        return robosuite.make(
            name,
            robots=config.robots,
            has_renderer=False,
            has_offscreen_renderer=cameras or render,
            use_camera_obs=cameras,
            camera_names=[config.camera_name],
            camera_heights=config.observation_height,
            camera_widths=config.observation_width,
            reward_shaping=config.dense_reward,
            ignore_done=True,
            hard_reset=False,
            seed=0,  # each reset reseeds its generator (RobosuiteTaskEnv.reset)
        )
    except (AssertionError, ValueError, KeyError) as err:
        raise UserError(f"robosuite cannot make {name} with env.robots={config.robots} ({err})") from err


class RobosuiteTaskEnv(TaskEnv):
    """One task; each episode's initial state drawn from the episode's seed (robosuite's generator reseeded in
    place, so its object samplers, which hold it, draw from the seed too)."""

    def __init__(self, config: RobosuiteEnvConfig, task: TaskSpec, render: bool) -> None:
        self.config = config
        self.metadata = {"render_modes": ["rgb_array"], "render_fps": config.fps}
        self._pixels = config.obs_type == "pixels_agent_pos"
        self._env = _make(config, task.name, cameras=self._pixels, render=render)
        self.observation_space, self.action_space = _spaces(config, _sizes(self._env))
        self._image = f"{config.camera_name}_image"
        self._last_frame: np.ndarray | None = None

    def _observation(self, raw: dict[str, Any]) -> dict[str, np.ndarray]:
        obs = {"agent_pos": raw["robot0_proprio-state"], "environment_state": raw["object-state"]}
        if self._pixels:
            self._last_frame = np.ascontiguousarray(raw[self._image][::-1])  # robosuite's images are upside down
            obs["pixels"] = self._last_frame
        return obs

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, np.ndarray], dict]:
        if seed is not None:
            self._env.rng.bit_generator.state = np.random.default_rng(seed).bit_generator.state
        return self._observation(self._env.reset()), {"is_success": False}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        raw, reward, _, _ = self._env.step(np.asarray(action, dtype=np.float64))
        success = bool(self._env._check_success())
        return self._observation(raw), float(reward), success, False, {"is_success": success}

    def render(self) -> np.ndarray:
        if self._last_frame is not None:
            return self._last_frame
        c = self.config
        frame = self._env.sim.render(camera_name=c.camera_name, width=c.observation_width, height=c.observation_height)
        return np.ascontiguousarray(frame[::-1])

    def close(self) -> None:
        self._env.close()
