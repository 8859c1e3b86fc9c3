"""The simulators of a LeRobot env type: one task's, built inside a worker process, and a description of every
task (names, language, step limits, spaces), read once in a child process so that the parent never holds one.

Both go through LeRobot's own factory (`lerobot.envs.factory.make_env`, one sub-env per vector env) and take the
single gymnasium env out of the vector env it returns: our workers step sub-envs one by one.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.envs.lerobot.types import SIMULATORS, make_lerobot_config, missing_simulator, type_class
from lerobot_hydra.envs.protocol import INIT_STATE_KEY

# The per-episode initial-state index of LeRobot's LIBERO env (`LiberoEnv.init_state_id`): set to the episode
# index before each reset, as lerobot-eval's sub-env k of a batch of n reaches init state k + n * batch.
INIT_STATE_ATTR = "init_state_id"


@dataclass(frozen=True)
class TaskInfo:
    """What the parent needs of one task, read from its simulator in a child process."""

    group: str
    task_id: int
    name: str
    description: str
    max_steps: int
    observation_space: Any
    action_space: Any

    def spec(self) -> TaskSpec:
        return TaskSpec(self.group, self.task_id, self.name, self.description, self.max_steps)


def make_envs(name: str, settings: dict[str, Any], trust_remote_code: bool) -> dict[str, dict[int, Any]]:
    """LeRobot's {group: {task id: vector env of one sub-env}} for the type and settings."""
    from lerobot.envs.factory import make_env

    if name == "libero_plus":
        require_libero_plus()
    elif SIMULATORS.get(name, ("",))[0] == "libero" and importlib.util.find_spec("libero") is not None:
        from lerobot_hydra.envs.libero_setup import prepare_libero

        prepare_libero()  # LIBERO's config and the shipped assets, as env=libero uses them (no interactive setup)
    cfg = make_lerobot_config(name, settings)
    try:
        return make_env(cfg, n_envs=1, use_async_envs=False, trust_remote_code=trust_remote_code)
    except ModuleNotFoundError as err:
        raise missing_simulator(name, err) from err
    except RuntimeError as err:
        if "trust_remote_code" in str(err) and not trust_remote_code:
            raise UserError(
                f"env.type={name} runs code from the Hugging Face Hub ({getattr(cfg, 'hub_path', '')}); "
                "allow it with env.trust_remote_code=true"
            ) from err
        raise


def require_libero_plus() -> None:
    """LeRobot's libero_plus type imports `libero`; hf-libero's standard LIBERO would silently run the standard
    suites in its place, so it is refused."""
    from importlib.metadata import PackageNotFoundError, distribution

    spec = importlib.util.find_spec("libero")
    try:
        standard = str(distribution("hf-libero").locate_file("libero/__init__.py"))
    except PackageNotFoundError:
        standard = None
    if spec is not None and spec.origin != standard:
        return
    found = f"the importable 'libero' is hf-libero's standard LIBERO ({spec.origin})" if spec else "no 'libero'"
    raise UserError(
        f"env.type=libero_plus needs LIBERO-plus's 'libero' package and assets, but {found} is installed; clone "
        "github.com/sylvestf/LIBERO-plus, put it first on PYTHONPATH, download its assets as its README says and "
        "name their folder under 'assets' in the config.yaml that LIBERO_CONFIG_PATH points to"
    )


def single_env(name: str, vec: Any) -> Any:
    """The one gymnasium env inside a vector env of one sub-env (refused for vector envs that hold none)."""
    envs = getattr(vec, "envs", None)
    if not isinstance(envs, list | tuple) or len(envs) != 1:
        raise UserError(
            f"env.type={name} builds a {type(vec).__name__} without separate sub-envs; env=lerobot steps one "
            "gymnasium env per sub-env in its own workers, so this type runs only under lerobot-eval"
        )
    return envs[0]


def close_all(envs: dict[str, dict[int, Any]]) -> None:
    for by_id in envs.values():
        for vec in by_id.values():
            vec.close()


def attribute(env: Any, name: str) -> Any:
    """`env.call(name)` of a vector env, for one env: the attribute through the wrappers, called if callable."""
    try:
        value = env.get_wrapper_attr(name)
    except AttributeError:
        return None
    return value() if callable(value) else value


def describe(name: str, settings: dict[str, Any], trust_remote_code: bool) -> list[TaskInfo]:
    """Every task of the type under `settings`, read from its simulators (run in a child process)."""
    envs = make_envs(name, settings, trust_remote_code)
    # A type that builds one task from its `task` setting (pusht: PushT-v0) names the task by it.
    selected = getattr(make_lerobot_config(name, settings), "task", None)
    single = selected if isinstance(selected, str) and "," not in selected else None
    try:
        return [
            _task_info(name, str(group), int(task_id), vec, single)
            for group, by_id in envs.items()
            for task_id, vec in by_id.items()
        ]
    finally:
        close_all(envs)


def _task_info(name: str, group: str, task_id: int, vec: Any, selected: str | None) -> TaskInfo:
    env = single_env(name, vec)
    description = attribute(env, "task_description")
    if not isinstance(description, str):
        description = attribute(env, "task")
    task_name = attribute(env, "task")
    if not isinstance(task_name, str) or not task_name:
        task_name = selected or group
    max_steps = attribute(env, "_max_episode_steps")
    if max_steps is None and env.spec is not None:
        max_steps = env.spec.max_episode_steps
    if not max_steps:
        raise UserError(f"env.type={name}: task {group}/{task_id} has no step limit (_max_episode_steps)")
    return TaskInfo(
        group=group,
        task_id=task_id,
        name=task_name,
        description=description if isinstance(description, str) else "",
        max_steps=int(max_steps),
        observation_space=vec.single_observation_space,
        action_space=vec.single_action_space,
    )


def describe_in_child(name: str, settings: dict[str, Any], trust_remote_code: bool) -> list[TaskInfo]:
    """`describe` in a fresh process: simulators and GL contexts never live in the parent."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(describe, name, settings, trust_remote_code).result()
        except UserError:
            raise
        except Exception as err:  # noqa: BLE001 - the simulator's own error, reported in one line
            text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"building the LeRobot {name} env failed: {text}; check the env.* settings") from err


def narrowed(name: str, settings: dict[str, Any], task: TaskSpec) -> dict[str, Any]:
    """Settings that build `task`'s group only (and only `task` where the type selects tasks by `task_ids`), so
    that a worker does not build a whole suite to use one task of it. The task is built exactly as within it."""
    import dataclasses

    fields = {f.name for f in dataclasses.fields(type_class(name))}
    out = dict(settings)
    if "task_ids" in fields:
        out.update(task=task.task_group, task_ids=[task.task_id])
    elif "task" in fields and "," in str(settings.get("task", "")):
        out["task"] = task.task_group
    return out


class LeRobotTaskEnv:
    """One task of a LeRobot env type: the gymnasium env LeRobot's factory builds for it."""

    def __init__(self, name: str, settings: dict[str, Any], trust_remote_code: bool, task: TaskSpec) -> None:
        envs = make_envs(name, narrowed(name, settings, task), trust_remote_code)
        vec = envs.get(task.task_group, {}).pop(task.task_id, None)
        close_all(envs)
        if vec is None:
            raise UserError(f"env.type={name} no longer builds task {task.label}; its settings changed")
        self._vec = vec
        self._env = single_env(name, vec)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        from lerobot.envs import utils

        info: dict[str, Any] = {"is_success": False}
        episode = (options or {}).get("episode_index")
        unwrapped = self._env.unwrapped
        if episode is not None and isinstance(getattr(unwrapped, INIT_STATE_ATTR, None), int):
            setattr(unwrapped, INIT_STATE_ATTR, int(episode))
            info[INIT_STATE_KEY] = int(episode)
        # lerobot-eval marks a genuine new episode so that LeRobot's freezing wrappers thaw (0.6.1 and later).
        new_rollout = getattr(utils, "NEW_ROLLOUT_OPTION", None)
        obs, _ = self._env.reset(seed=seed, options={new_rollout: True} if new_rollout else None)
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self._env.step(action)
        success = bool(info.get("is_success", False))
        return obs, float(reward), bool(terminated), bool(truncated), {"is_success": success}

    def render(self) -> Any:
        return self._env.render()

    def close(self) -> None:
        self._vec.close()
