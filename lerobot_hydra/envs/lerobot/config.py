"""`env=lerobot`: the env config that builds any LeRobot env type through our plan, workers and sinks.

`env.type` names the type; every other key of the env node is a field of that type (`env.obs_type=pixels`),
checked against its dataclass and decoded as lerobot-eval decodes `--env.<field>`. The tasks, their groups,
language and step limits come from the type (LeRobot's factory), read once in a child process; the observation
reaches the policy through LeRobot's `preprocess_observation` and the type's own env processors, as lerobot-eval
hands it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import EnvConfig, TaskEnv, TaskSpec
from lerobot_hydra.envs.lerobot.types import OWN_KEYS, SIMULATORS, check_keys, make_lerobot_config, type_class

if TYPE_CHECKING:
    from lerobot_hydra.envs.lerobot.sim import TaskInfo
    from lerobot_hydra.processors.pipeline import Pipeline

# Hydra's instantiate keys (not settings).
INSTANTIATE_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}


@dataclass(init=False)
class LeRobotEnvConfig(EnvConfig):
    # A registered LeRobot env type: its own (pusht, metaworld, libero, ...), a plugin's (so101), a Hub env's.
    type: str = "pusht"
    # Hub env types (isaaclab_arena) download and run the Hub repo's env.py: only with this set.
    trust_remote_code: bool = False
    # The type's fields as given (env.<field>=...); the rest keep the type's defaults.
    settings: dict[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        type: str = "pusht",  # noqa: A002 - LeRobot's name for it (--env.type)
        trust_remote_code: bool = False,
        compute_all_observations: bool = False,
        **settings: Any,
    ) -> None:
        for key in ("processors", "settings"):
            if key in settings:
                raise UserError(f"env.{key} cannot be set for env=lerobot: the env type brings its own processors")
        self.type = str(type)
        self.trust_remote_code = bool(trust_remote_code)
        self.compute_all_observations = bool(compute_all_observations)
        self.settings = dict(settings)
        lerobot_cfg = self.lerobot_config()
        # The base fields, as the type sets them (videos use fps; messages the task).
        self.task = getattr(lerobot_cfg, "task", "") or ""
        self.episode_length = getattr(lerobot_cfg, "episode_length", None)
        self.fps = int(getattr(lerobot_cfg, "fps", 30))
        self.features_map = {}
        self.processors = {"pre": [], "post": []}
        # The LeRobot config of the policy the processors are built for (`for_policy`); None: the type's own.
        self.policy_config: Any = None

    @classmethod
    def check_node(cls, node: DictConfig, key: str) -> None:
        """The env node's keys against the type's fields and their values against its schema (schemas/schema.py
        calls this instead of its generic check)."""
        values = OmegaConf.to_container(node, resolve=True)
        assert isinstance(values, dict)
        name = str(values.get("type", "pusht"))
        if "python" in values:
            raise UserError(
                "env.python is not offered for env=lerobot (LeRobot's env types run in this interpreter's workers); "
                "run the benchmark as env=metaworld, env=libero or env=gym with env.python"
            )
        settings = {k: v for k, v in values.items() if k not in INSTANTIATE_KEYS and k not in OWN_KEYS}
        check_keys(name, list(settings))
        make_lerobot_config(name, settings)

    def lerobot_config(self) -> Any:
        """The LeRobot EnvConfig these settings make (a new one each call: LeRobot's configs are mutable)."""
        return make_lerobot_config(self.type, self.settings)

    @cached_property
    def _tasks(self) -> list[TaskInfo]:
        from lerobot_hydra.envs.lerobot.sim import describe_in_child

        return describe_in_child(self.type, self.settings, self.trust_remote_code)

    def tasks(self) -> list[TaskSpec]:
        return [info.spec() for info in self._tasks]

    def spaces(self, task: TaskSpec) -> tuple[Any, Any]:
        info = next((i for i in self._tasks if (i.group, i.task_id) == task.key), None)
        if info is None:
            raise UserError(f"env.type={self.type} has no task {task.label}")
        return info.observation_space, info.action_space

    def build(self, task: TaskSpec, render: bool) -> TaskEnv:
        from lerobot_hydra.envs.lerobot.sim import LeRobotTaskEnv

        return LeRobotTaskEnv(self.type, self.settings, self.trust_remote_code, task)

    def for_policy(self, policy: Any) -> LeRobotEnvConfig:
        """A copy that builds the env processors lerobot-eval gives this policy (`make_env_pre_post_processors`:
        the type's own, or for an XVLA policy LeRobot's XVLA LIBERO processors, whatever the type)."""
        from lerobot_hydra.processors.lerobot_env import check_xvla_env

        policy_config = policy.lerobot_config()  # make_env_pre_post_processors needs the whole config
        if getattr(policy_config, "type", None) == "xvla":
            check_xvla_env(self.type, policy_config)
        adapted = copy.copy(self)
        adapted.policy_config = policy_config
        return adapted

    def policy_action_space(self, task: TaskSpec) -> Any:
        if getattr(self.policy_config, "type", None) == "xvla":
            return None  # its 6D-rotation step turns the first 10 of the policy's dimensions into LIBERO's 7
        return super().policy_action_space(task)

    def build_processors(self, overrides: dict[str, list[Any]] | None = None) -> tuple[Pipeline, Pipeline]:
        """LeRobot's observation preprocessing and the env processors lerobot-eval picks for the type and the
        policy (`make_env_pre_post_processors`)."""
        from lerobot.envs.factory import make_env_pre_post_processors

        from lerobot_hydra.processors.lerobot_env import LeRobotEnvAction, LeRobotEnvObservation
        from lerobot_hydra.processors.observation import ToNumpyAction
        from lerobot_hydra.processors.pipeline import Pipeline

        if overrides:
            raise UserError("env=lerobot takes its processors from the env type; they cannot be overridden")
        env_pre, env_post = make_env_pre_post_processors(self.lerobot_config(), self.policy_config)
        return Pipeline([LeRobotEnvObservation(env_pre)]), Pipeline([LeRobotEnvAction(env_post), ToNumpyAction()])

    def without_processors(self) -> LeRobotEnvConfig:
        return self  # holds no processor objects: build_processors makes them

    def display_name(self) -> str:
        return f"LeRobot {self.type}"

    def worker_preload(self) -> list[str]:
        return ["lerobot.envs.factory", type_class(self.type).__module__]

    def distributions(self) -> list[str]:
        """LeRobot, and the distribution of the simulator (LeRobot's own types) or of the plugin that registers
        the type."""
        from lerobot_hydra.envs.gym import distributions_shipping

        module = SIMULATORS[self.type][0] if self.type in SIMULATORS else type_class(self.type).__module__
        return list(dict.fromkeys(["lerobot", *distributions_shipping(module.split(".")[0])]))

    def __getstate__(self) -> dict[str, Any]:
        # Workers rebuild what they need from the settings; the probed tasks stay in the parent.
        state = dict(self.__dict__)
        state.pop("_tasks", None)
        return state
