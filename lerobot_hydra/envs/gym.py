"""Any registered Gymnasium env as a one-task benchmark (PushT goes through here)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import EnvConfig, TaskEnv, TaskSpec

DEFAULT_EPISODE_LENGTH = 1000
DEFAULT_SUCCESS_KEY = "is_success"
# Raw keys conf/env/gym.yaml maps for any id (LeRobot's gym env conventions); an id has some of them or none.
GENERIC_RAW_KEYS = ("agent_pos", "environment_state", "pixels", "observation")


@dataclass
class GymEnvConfig(EnvConfig):
    gym_id: str = ""
    # Module imported before gym.make so that it registers `gym_id` (e.g. gym_pusht).
    package: str | None = None
    # The project extra that installs `package`, named in the error when it is missing.
    extra: str | None = None
    gym_kwargs: dict[str, Any] = field(default_factory=dict)
    # Task group name in results; empty: the gym id without its namespace and version.
    group: str = ""
    # Language description handed to policies as `task`; empty: the gym id.
    task: Any = ""
    # Key of the env's info dict that holds per-step success.
    success_key: str = DEFAULT_SUCCESS_KEY

    def __post_init__(self) -> None:
        if not self.gym_id:
            raise UserError("env.gym_id is required for env=gym, e.g. env.gym_id=CartPole-v1")
        if self.extra and not self.package:
            raise UserError("env.extra names the project extra that installs env.package; set env.package too")

    def _register(self) -> None:
        import gymnasium as gym

        # Imported even when the id is registered already: a package that does not import is an error, never ignored.
        if self.package:
            try:
                importlib.import_module(self.package)
            except ImportError as err:
                hint = f'pip install -e ".[{self.extra}]"' if self.extra else f"pip install {self.package}"
                raise UserError(
                    f"env {self.gym_id} needs the package '{self.package}'; install it with: {hint}"
                ) from err
        if self.gym_id not in gym.registry:
            where = f" after importing '{self.package}'" if self.package else ""
            raise UserError(
                f"Gymnasium id '{self.gym_id}' is not registered{where}; "
                "set env.package to the module that registers it"
            )

    @cached_property
    def _spec(self) -> tuple[int, Any, Any]:
        """(max steps, observation space, action space), read from one env made and closed in the parent."""
        self._register()
        env = make_with_kwargs(self.gym_id, self.gym_kwargs)
        try:
            limit = self.episode_length
            if limit is None:
                limit = (env.spec.max_episode_steps if env.spec else None) or DEFAULT_EPISODE_LENGTH
            return int(limit), env.observation_space, env.action_space
        finally:
            env.close()

    def raw_observation_keys(self) -> list[str]:
        """The keys of this id's observation (nested ones joined with '/'; a plain array is `observation`), plus
        the generic keys every gym config maps by default, whichever of them this id has."""
        return sorted({*GENERIC_RAW_KEYS, *_raw_keys(self._spec[1])})

    def tasks(self) -> list[TaskSpec]:
        self.check_features_map()
        name = self.gym_id.split("/")[-1]
        group = self.group or name.rsplit("-v", 1)[0]
        description = str(self.task) if self.task else self.gym_id
        return [TaskSpec(task_group=group, task_id=0, name=name, description=description, max_steps=self._spec[0])]

    def spaces(self, task: TaskSpec) -> tuple[Any, Any]:
        return self._spec[1], self._spec[2]

    def build(self, task: TaskSpec, render: bool) -> Any:
        return GymTaskEnv(self, task, render)

    def display_name(self) -> str:
        return self.gym_id

    def worker_preload(self) -> list[str]:
        return [self.package] if self.package else []

    def distributions(self) -> list[str]:
        """Gymnasium (its own envs) and the distribution that installs `package` (gym_pusht -> gym-pusht)."""
        top = (self.package or "").split(".")[0]
        return ["gymnasium", *(distributions_shipping(top) if top else [])]

    def __getstate__(self) -> dict[str, Any]:
        # The probed spaces are cheap to recompute and may not pickle; ship the plain config only.
        state = dict(self.__dict__)
        state.pop("_spec", None)
        return state


def distributions_shipping(module: str) -> list[str]:
    """The installed distributions that ship the top-level `module`: the one named like it when it does (a
    lookup), else what a scan of every installed distribution finds (~0.7 s in a LeRobot environment)."""
    from importlib.metadata import PackageNotFoundError, distribution, packages_distributions

    try:
        named = distribution(module)  # names are normalized: gym_pusht finds gym-pusht
    except PackageNotFoundError:
        return packages_distributions().get(module, [])
    if any(path.parts[0] == module for path in named.files or []):
        return [named.metadata["Name"]]
    return packages_distributions().get(module, [])


def _raw_keys(space: Any, prefix: str = "") -> list[str]:
    from gymnasium import spaces

    if not isinstance(space, spaces.Dict):
        return [prefix.rstrip("/") or "observation"]
    return [key for name, sub in space.spaces.items() for key in _raw_keys(sub, f"{prefix}{name}/")]


def make_with_kwargs(gym_id: str, gym_kwargs: dict[str, Any], **options: Any) -> Any:
    """gym.make, with an error of the env's constructor (a keyword it does not take, a bad value) reported as
    a mistake in env.gym_kwargs."""
    import gymnasium as gym

    try:
        return gym.make(gym_id, disable_env_checker=True, **options, **gym_kwargs)
    except Exception as err:  # noqa: BLE001 - any constructor error is reported with the settings that caused it
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        reason = reason.split(" was raised from the environment creator")[0]  # gymnasium's wrapper adds the kwargs
        if not gym_kwargs:
            raise UserError(f"env.gym_id {gym_id} cannot be made: {reason}") from err
        raise UserError(f"env.gym_kwargs {dict(gym_kwargs)}: {gym_id} cannot be made with them ({reason})") from err


class GymTaskEnv(TaskEnv):
    def __init__(self, config: GymEnvConfig, task: TaskSpec, render: bool) -> None:
        config._register()
        self.config = config
        kwargs = dict(config.gym_kwargs)
        if render:
            kwargs.setdefault("render_mode", "rgb_array")
        self._env = make_with_kwargs(config.gym_id, kwargs, max_episode_steps=task.max_steps)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, _ = self._env.reset(seed=seed)
        return obs, {"is_success": False}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self._env.step(action)
        key = self.config.success_key
        if key != DEFAULT_SUCCESS_KEY and key not in info:  # the default may be absent: an env without success
            raise UserError(
                f"env.success_key={key}: {self.config.gym_id} has no such key in the info of its step; its keys: "
                f"{', '.join(map(str, info)) or '(none)'}"
            )
        return (
            obs,
            float(reward),
            bool(terminated),
            bool(truncated),
            {"is_success": bool(info.get(self.config.success_key, False))},
        )

    def render(self) -> Any:
        return self._env.render()

    def close(self) -> None:
        self._env.close()
