"""MetaWorld (v3 tasks on MuJoCo 3.3): single tasks, comma lists, difficulty groups or all 50 (MT50)."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError, did_you_mean
from lerobot_hydra.envs.base import (
    DrawsOnDemand,
    EnvConfig,
    TaskSpec,
    log_once,
    split_names,
    state_unless_pixels_read,
)

OBS_TYPES = ("state", "pixels", "pixels_agent_pos")
# MetaWorld's own per-episode step limit (`max_path_length`).
MAX_PATH_LENGTH = 500
# Pose of the corner2 camera used by LeRobot's MetaWorld datasets (as in arXiv:2206.14244).
CORNER2_POSITION = (0.75, 0.075, 0.7)
# MetaWorld 3.1 resets fail from this MuJoCo major version on (docs/simulator-envs.md).
MUJOCO_MAJOR_LIMIT = 4


@cache
def task_catalog() -> dict[str, Any]:
    """Difficulty groups, language descriptions and scripted-expert class names of the 50 v3 tasks."""
    return json.loads((Path(__file__).with_name("metaworld_tasks.json")).read_text())


def expand_tasks(task: str | list[str]) -> list[tuple[str, list[str]]]:
    """'easy,reach-v3' -> [('easy', [...28 tasks]), ('reach-v3', ['reach-v3'])]; 'all' -> the four groups."""
    catalog = task_catalog()
    groups: dict[str, list[str]] = catalog["difficulty_groups"]
    names = split_names(task, "env.task")
    if not names:
        raise UserError("env.task is empty; give a MetaWorld task (reach-v3), a list, a difficulty group or 'all'")
    out: list[tuple[str, list[str]]] = []
    for name in names:
        if name == "all":
            out.extend(groups.items())
        elif name in groups:
            out.append((name, groups[name]))
        elif name in catalog["descriptions"]:
            out.append((name, [name]))
        else:
            valid = ["all", *groups, *catalog["descriptions"]]
            raise UserError(
                f"unknown MetaWorld task '{name}'{did_you_mean(name, valid)}; use a v3 task name such as reach-v3, "
                f"a difficulty group ({', '.join(groups)}) or 'all'"
            )
    return without_repeats(out)


def without_repeats(selection: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """Each group once, and no single task that a selected group already holds ([all, easy], [easy, reach-v3]):
    a task's episodes are run and counted once."""
    in_groups = {name for group, names in selection if names != [group] for name in names}
    kept: list[tuple[str, list[str]]] = []
    dropped: list[str] = []
    for group, names in selection:
        single = names == [group]
        if any(g == group for g, _ in kept) or (single and group in in_groups):
            dropped.append(group)
        else:
            kept.append((group, names))
    if dropped:
        names = ", ".join(dict.fromkeys(dropped))
        log_once(f"env.task selects {names} more than once (directly or through a group); each task is run once")
    return kept


@cache
def model_cameras() -> tuple[str, ...]:
    """The cameras of MetaWorld's Sawyer scene (`objects/assets/xyz_base.xml`, which every v3 task's model
    includes), read from the model file without importing MetaWorld or building a simulator."""
    import importlib.util
    import xml.etree.ElementTree as ET

    spec = importlib.util.find_spec("metaworld")
    if spec is None or not spec.submodule_search_locations:
        return ()
    base = Path(next(iter(spec.submodule_search_locations))) / "assets" / "objects" / "assets" / "xyz_base.xml"
    return tuple(str(c.get("name")) for c in ET.parse(base).iter("camera") if c.get("name"))


def check_camera(name: str) -> None:
    cameras = model_cameras()
    if cameras and name not in cameras:
        raise UserError(
            f"env.camera_name '{name}' is not a MetaWorld camera{did_you_mean(name, list(cameras))}; "
            f"valid cameras: {', '.join(cameras)}"
        )


@dataclass
class MetaWorldEnvConfig(EnvConfig):
    task: Any = "reach-v3"
    obs_type: str = "pixels_agent_pos"
    camera_name: str = "corner2"
    observation_height: int = 480
    observation_width: int = 480
    # End an episode at its first success, as LeRobot's MetaWorld env does.
    terminate_on_success: bool = True
    fps: int = 80

    def __post_init__(self) -> None:
        if self.obs_type not in OBS_TYPES:
            raise UserError(f"env.obs_type must be one of {', '.join(OBS_TYPES)}, got '{self.obs_type}'")
        if self.episode_length is not None and not 1 <= self.episode_length <= MAX_PATH_LENGTH:
            raise UserError(f"env.episode_length must be between 1 and {MAX_PATH_LENGTH} for MetaWorld")
        check_camera(self.camera_name)
        self.check_features_map()

    def raw_observation_keys(self) -> tuple[str, ...]:
        return ("agent_pos", "environment_state", "pixels")

    def tasks(self) -> list[TaskSpec]:
        descriptions = task_catalog()["descriptions"]
        max_steps = self.episode_length or MAX_PATH_LENGTH
        return [
            TaskSpec(task_group=group, task_id=i, name=name, description=descriptions[name], max_steps=max_steps)
            for group, names in expand_tasks(self.task)
            for i, name in enumerate(names)
        ]

    def spaces(self, task: TaskSpec) -> tuple[Any, Any]:
        from gymnasium import spaces

        parts: dict[str, spaces.Space] = {}
        if self.obs_type in ("state", "pixels_agent_pos"):
            parts["agent_pos"] = spaces.Box(-np.inf, np.inf, (4,), np.float64)
            parts["environment_state"] = spaces.Box(-np.inf, np.inf, (39,), np.float64)
        if self.obs_type in ("pixels", "pixels_agent_pos"):
            shape = (self.observation_height, self.observation_width, 3)
            parts["pixels"] = spaces.Box(0, 255, shape, np.uint8)
        return spaces.Dict(parts), spaces.Box(-1.0, 1.0, (4,), np.float32)

    def build(self, task: TaskSpec, render: bool) -> Any:
        return MetaWorldTaskEnv(self, task, render)

    def without_unread(self, reads: set[str]) -> MetaWorldEnvConfig:
        # The state comes with every MetaWorld step for free; only the camera frame costs.
        return state_unless_pixels_read(self, reads)

    def worker_preload(self) -> list[str]:
        return ["metaworld"]

    def distributions(self) -> list[str]:
        return ["metaworld"]

    def check_simulator(self, packages: dict[str, str | None], where: str) -> None:
        mujoco = packages.get("mujoco") or ""
        if mujoco.split(".")[0].isdigit() and int(mujoco.split(".")[0]) >= MUJOCO_MAJOR_LIMIT:
            raise UserError(
                f"{where} mujoco {mujoco}, under which MetaWorld {packages.get('metaworld')} fails to reset "
                "(reset_mocap_welds: the shape of MuJoCo 4's eq_data changed); use mujoco<4, e.g. mujoco==3.5.0"
            )


def _make_task_env(name: str, **kwargs: Any) -> Any:
    """A v3 env set up as MT1 sets it up (goal observable), with object and goal positions drawn at
    every reset from the env's own seeded generator. Building the env directly skips MT1's sampling of
    50 goal vectors, which costs four times the env itself."""
    import metaworld
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS, ML1_ARGS_KWARGS

    cls = ALL_V3_ENVIRONMENTS[name]
    env = cls(**kwargs)
    task_kwargs = {k: v for k, v in ML1_ARGS_KWARGS[name]["kwargs"].items() if k != "task_id"}
    data = {**task_kwargs, "env_cls": cls, "rand_vec": None, "partially_observable": False}
    env.set_task(metaworld.Task(env_name=name, data=pickle.dumps(data)))
    env._freeze_rand_vec = False
    env.seeded_rand_vec = True
    return env


class MetaWorldTaskEnv(DrawsOnDemand):
    """One MetaWorld v3 task, seeded per episode, with LeRobot's observation keys.

    `agent_pos` is LeRobot's 4-D state (hand xyz + gripper opening), `environment_state` the full 39-D
    MetaWorld observation that the scripted experts need.
    """

    def __init__(self, config: MetaWorldEnvConfig, task: TaskSpec, render: bool) -> None:
        import gymnasium as gym

        self.config = config
        self.task = task
        self.observation_space, self.action_space = config.spaces(task)
        self.metadata = {"render_modes": ["rgb_array"], "render_fps": config.fps}
        self._pixels = config.obs_type != "state"
        self._pixels_shape = (config.observation_height, config.observation_width, 3)
        needs_renderer = self._pixels or render
        env = _make_task_env(
            task.name,
            render_mode="rgb_array" if needs_renderer else None,
            camera_name=config.camera_name if needs_renderer else None,
            width=config.observation_width,
            height=config.observation_height,
        )
        if config.camera_name == "corner2":
            env.model.cam_pos[env.model.camera("corner2").id] = CORNER2_POSITION
        if render and not self._pixels:
            # Frames only for videos: without the shadow map and multisampling a CPU frame costs ~12x less.
            # Pixel observations keep MetaWorld's full quality, which learned policies were trained on.
            env.model.vis.quality.shadowsize = 0
            env.model.vis.quality.offsamples = 0
        self._last_frame: np.ndarray | None = None
        self._draw = True  # the next step draws the camera (`draw_next` holds for one step)
        self._env: gym.Env = env

    def _frame(self) -> np.ndarray:
        frame = self._env.render()
        if self.config.camera_name == "corner2":
            # corner2 renders with both image axes inverted.
            frame = frame[::-1, ::-1]
        return np.ascontiguousarray(frame)

    def _observation(self, raw: np.ndarray) -> dict[str, np.ndarray]:
        obs: dict[str, np.ndarray] = {}
        if self.config.obs_type != "pixels":
            obs["agent_pos"] = raw[:4]
            obs["environment_state"] = raw
        if self._pixels:
            # Unread, the camera is not drawn (a filmed episode's frame is then drawn by `render`, the same frame).
            self._last_frame = self._frame() if self._draw else None
            obs["pixels"] = self._last_frame if self._last_frame is not None else np.zeros(self._pixels_shape, np.uint8)
        self._draw = True
        return obs

    def draw_next(self, observation: bool, film: bool) -> None:
        self._draw = observation

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, np.ndarray], dict]:
        # MetaWorld 3 ignores reset(seed=...): its generator is seeded through seed().
        if seed is not None:
            self._env.seed(seed)
        raw, _ = self._env.reset()
        return self._observation(raw), {"is_success": False}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        raw, reward, terminated, truncated, info = self._env.step(np.asarray(action, dtype=np.float32))
        success = bool(info.get("success", 0.0))
        terminated = bool(terminated) or (success and self.config.terminate_on_success)
        return self._observation(raw), float(reward), terminated, bool(truncated), {"is_success": success}

    def render(self) -> np.ndarray:
        # With pixel observations the current frame was already rendered for the observation.
        return self._last_frame if self._last_frame is not None else self._frame()

    def close(self) -> None:
        self._env.close()
