"""The env contract: the config a `conf/env/*.yaml` names, and the simulator it builds for each task.

Every extension area follows one rule: `_target_` names a config dataclass, its `build()` makes the object the
rollout drives, and that object satisfies a Protocol of the area's base module. For envs:
`_target_` -> an `EnvConfig` subclass -> `build(task, render)` -> a `TaskEnv` (one simulator for one task).
The config also describes the benchmark without building anything: its tasks, the spaces of each task's
simulator, the raw observation keys it can produce, its processors, provenance and worker preloads.

Capabilities are declared on the config, never discovered: an env that can skip unread observations says so by
overriding `without_unread`, one that knows its raw keys by `raw_observation_keys`. The keys of reset options
and infos that the vector envs add on top are in envs/protocol.py.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from lerobot_hydra.core.errors import UserError, did_you_mean
from lerobot_hydra.core.records import TaskKey

if TYPE_CHECKING:
    import gymnasium as gym

    from lerobot_hydra.processors.pipeline import Pipeline

log = logging.getLogger("lerobot_hydra")


@dataclass(frozen=True)
class TaskSpec:
    """One task of a benchmark; `task_group`/`task_id` as LeRobot names them."""

    task_group: str
    task_id: int
    name: str
    description: str
    max_steps: int

    @property
    def key(self) -> TaskKey:
        return (self.task_group, self.task_id)

    @property
    def label(self) -> str:
        return f"{self.task_group}/{self.task_id}"


class TaskEnv(Protocol):
    """One task's simulator, as `EnvConfig.build` makes it (a gymnasium-style env without spaces: the config's
    `spaces(task)` describes them)."""

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Start episode `options["episode_index"]` (k), placed deterministically from `seed` (and k). The info may
        report the benchmark's initial-state id as `info["init_state_id"]`."""
        ...

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """(observation, reward, terminated, truncated, info), success reported as `info["is_success"]`."""
        ...

    def render(self) -> Any:
        """An RGB frame (H, W, 3) of the current state, or None when the env cannot draw one."""
        ...

    def close(self) -> None: ...


class DrawsOnDemand(TaskEnv, Protocol):
    """A simulator that draws its cameras only on the steps whose observation is read. A class subclasses it to
    declare so; any other simulator draws every camera at every step."""

    def draw_next(self, observation: bool, film: bool) -> None:
        """What the next step draws besides the physics: the cameras of its observation (`observation`; when not
        drawn, a camera's image holds zeros, and nothing may read it) and the frame `render()` returns for a
        filmed episode (`film`), exactly as when everything is drawn. Resets always draw everything."""
        ...


def draws_on_demand(env: Any) -> bool:
    """Whether `env`'s class declared `DrawsOnDemand` (subclasses it)."""
    return DrawsOnDemand in type(env).__mro__


@dataclass
class EnvConfig:
    """Base of every env config. Subclasses are dataclasses named by `_target_` in `conf/env/*.yaml`; their
    fields are the YAML's keys (checked against them before anything is built).

    A subclass implements `tasks()`, `spaces()` and `build()`. `build()` runs inside the worker process on first
    use, so no simulator or GL context is ever created in the parent process.
    """

    # A name, a comma-separated string, or a list (env.task=[a,b] on the command line).
    task: Any = ""
    # Steps before an episode is cut; None uses the benchmark's own limit.
    episode_length: int | None = None
    # Frames per second of the simulator's control loop (used for videos).
    fps: int = 30
    # Raw observation key (nested keys joined with '/') -> LeRobot key, used by the `pre` processors.
    features_map: dict[str, str] = field(default_factory=dict)
    # `pre`: raw observation -> LeRobot batch; `post`: policy action -> env action. Instantiated `_target_` steps.
    processors: dict[str, list[Any]] = field(default_factory=lambda: {"pre": [], "post": []})
    # Debugging: compute every observation the settings name, also those the policy does not read.
    compute_all_observations: bool = False
    # The interpreter the simulator workers run in (docs/simulator-envs.md): null, this one; else a Python executable
    # (a virtual environment's bin/python) or a command prefix ending in one (`apptainer exec image.sif python`).
    python: str | None = None

    def tasks(self) -> list[TaskSpec]:
        raise NotImplementedError

    def spaces(self, task: TaskSpec) -> tuple[gym.Space, gym.Space]:
        """(observation_space, action_space) of `build(task)`, known without creating a simulator."""
        raise NotImplementedError

    def measure(self, task: TaskSpec) -> dict[str, Any]:
        """What only a built simulator tells of `task`, as JSON values (a benchmark whose spaces it needs, such as
        env=robosuite's): run on the simulator side, in a process of `python`'s interpreter, by
        `vector/interpreter.simulator_facts`, which its `spaces()` calls."""
        raise NotImplementedError

    def build(self, task: TaskSpec, render: bool) -> TaskEnv:
        """The simulator for `task`; `render`: it will be asked for frames (videos) besides its observations."""
        raise NotImplementedError

    def zero_action_holds(self) -> bool:
        """Whether an all-zero action leaves the robot as it is (`eval.clock.hold=noop`): delta end-effector control
        whose gripper keeps its state at 0. False where a zero action moves something or is not known to."""
        return False

    def display_name(self) -> str:
        """The env in messages (`building the <name> env failed`): by default its kind (MetaWorld, Libero, ...)."""
        return type(self).__name__.removesuffix("EnvConfig")

    def raw_observation_keys(self) -> Iterable[str]:
        """Every raw observation key this benchmark can produce under any of its settings: the keys that
        `features_map` may name. Empty: the benchmark does not say (its features_map is not checked)."""
        return ()

    def check_features_map(self) -> None:
        """A features_map key the env never produces would be ignored silently: refuse it."""
        known = sorted(self.raw_observation_keys())
        if not known:
            return
        for key in self.features_map:
            if key not in known:
                raise UserError(
                    f"env.features_map.{key}: the env has no raw observation '{key}'{did_you_mean(key, known)}; "
                    f"features_map maps one of: {', '.join(known)}"
                )

    def observing(self, reads: set[str] | None) -> EnvConfig:
        """This config computing only the observations in `reads` (LeRobot keys, as the `pre` processors name
        them; None: all of them), or itself with `compute_all_observations`. Video frames come from `render()`,
        which draws them itself when no observation holds them, so filming needs no observation."""
        if reads is None or self.compute_all_observations:
            return self
        return self.without_unread(reads)

    def without_unread(self, reads: set[str]) -> EnvConfig:
        """A copy that skips the observations (cameras) outside `reads`; an env that cannot skip any: itself."""
        return self

    def worker_preload(self) -> list[str]:
        """Modules worth importing once in the forkserver so that each worker starts quickly."""
        return []

    def distributions(self) -> list[str]:
        """The installed distributions (pip names) that simulate this benchmark, recorded in every result's
        provenance; the merge refuses shards whose versions of them differ."""
        return []

    def check_simulator(self, packages: dict[str, str | None], where: str) -> None:
        """Refuses, in one line starting with `where` (who has them), simulator versions (`packages`: pip name ->
        version) this benchmark is known to fail under; by default it knows of none."""

    def for_policy(self, policy: Any) -> EnvConfig:
        """This env as it hands observations to `policy` (the run's PolicyConfig): itself, or a copy whose
        processors differ (lerobot-eval gives some families their own env processors), or a UserError when this
        env cannot run the policy as intended. Runs before the workers start: ask `policy.family()` (a JSON read)
        and call `policy.lerobot_config()` (which imports LeRobot, seconds) only if the whole config is needed."""
        return self

    def policy_action_space(self, task: TaskSpec) -> Any:
        """The action space the policy's actions must fill, before the `post` processors; None: any (the `post`
        processors reshape them)."""
        return self.spaces(task)[1]

    def without_processors(self) -> EnvConfig:
        """A copy to ship to worker processes (processors stay in the parent)."""
        return dataclasses.replace(self, processors={"pre": [], "post": []})

    def build_processors(self, overrides: dict[str, list[Any]] | None = None) -> tuple[Pipeline, Pipeline]:
        from lerobot_hydra.processors.pipeline import Pipeline

        steps = {**self.processors, **(overrides or {})}
        return Pipeline(steps.get("pre", [])), Pipeline(steps.get("post", []))


def state_unless_pixels_read(config: Any, reads: set[str]) -> Any:
    """`config` (an env config with `obs_type` and a camera under the raw key `pixels`) as it computes what `reads`
    names: itself when the camera is read or it computes state only, else a copy with `obs_type="state"`."""
    from lerobot_hydra.processors.observation import lerobot_key

    if config.obs_type == "state" or lerobot_key(config.features_map, "pixels") in reads:
        return config
    return dataclasses.replace(config, obs_type="state")


def split_names(value: str | list[str] | tuple[str, ...], key: str = "") -> list[str]:
    """'a,b, c' or a list -> ['a', 'b', 'c']; a name given twice is kept once, in its first place (one log line
    naming the setting `key`)."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return unique([str(item).strip() for item in items if str(item).strip()], key)


def unique(items: Iterable[Any], key: str) -> list[Any]:
    """`items` without repeats, in first-seen order; one log line (once per process: task lists are expanded
    more than once) names what `key` listed more than once."""
    items = list(items)
    kept = list(dict.fromkeys(items))
    if len(kept) < len(items):
        twice = ", ".join(str(item) for item, n in Counter(items).items() if n > 1)
        log_once(f"{key or 'the selection'} names {twice} more than once; each is used once")
    return kept


_logged: set[str] = set()


def log_once(message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        log.info(message)


def unique_tasks(tasks: Sequence[TaskSpec]) -> list[TaskSpec]:
    """One entry per (group, task id), in order: a task listed twice must not run, or count, twice."""
    first: dict[str, TaskSpec] = {}
    for task in tasks:
        first.setdefault(task.label, task)
    return [first[label] for label in unique([t.label for t in tasks], "the task list")]
