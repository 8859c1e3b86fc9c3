"""MetaWorld's own scripted policies (`Sawyer…V3Policy`), one per task, applied row by row to the batch."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.policies.base import Policy, PolicyConfig, RowResettablePolicy, rtc_join_refusal
from lerobot_hydra.schemas.clock import ClockConfig

STATE_KEY = "observation.environment_state"


@dataclass
class MetaWorldExpertConfig(PolicyConfig):
    # None: one action per step from the current state. N: plan N actions at a time, open loop (a chunked policy
    # that runs on a real-time eval.clock; policies/metaworld_chunked.py).
    chunk: int | None = None

    def clock_refusal(self, clock: ClockConfig) -> str | None:
        if clock.real_time and self.chunk is None:
            return (
                f"eval.clock.mode={clock.mode}: policy=metaworld_expert computes one action per step; give "
                "policy.chunk=10 to plan chunks"
            )
        return rtc_join_refusal(clock, "policy=metaworld_expert")

    @classmethod
    def check_env(cls, env_cls: type) -> None:
        from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig

        if not issubclass(env_cls, MetaWorldEnvConfig):
            raise UserError(
                "policy=metaworld_expert (the default policy) works only with env=metaworld; for this env choose "
                "policy=random or a LeRobot policy (policy=smolvla, pi0, pi05, act, diffusion)"
            )

    def reads(self, env: EnvConfig) -> set[str]:
        return {STATE_KEY}

    def resets_rows(self) -> bool:
        return True

    def build(self, env: EnvConfig, device: str) -> Policy:
        from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig

        self.check_env(type(env))
        assert isinstance(env, MetaWorldEnvConfig)
        if env.obs_type == "pixels":
            raise UserError(
                "policy=metaworld_expert needs MetaWorld's state; use env.obs_type=state or pixels_agent_pos"
            )
        if self.chunk is not None:
            from lerobot_hydra.policies.metaworld_chunked import ChunkedExpertPolicy

            if isinstance(self.chunk, bool) or not isinstance(self.chunk, int) or self.chunk < 1:
                raise UserError(f"policy.chunk must be an integer of 1 or more (actions per plan), got {self.chunk!r}")
            return ChunkedExpertPolicy(self.chunk, functools.cache(expert_for))
        return MetaWorldExpertPolicy()

    def distributions(self) -> list[str]:
        return ["metaworld"]


def expert_for(task_name: str) -> Any:
    import metaworld.policies

    from lerobot_hydra.envs.metaworld import task_catalog

    return getattr(metaworld.policies, task_catalog()["expert_policies"][task_name])()


class MetaWorldExpertPolicy(RowResettablePolicy):
    """One expert per batch row, for the task of the row's episode (rows of a batch may run different tasks)."""

    def __init__(self) -> None:
        self._experts: list[Any] = []  # per row; None: idle
        self._by_task: dict[str, Any] = {}  # the experts keep no per-episode state: one per task serves all rows

    def _expert(self, task: TaskSpec) -> Any:
        if task.name not in self._by_task:
            self._by_task[task.name] = expert_for(task.name)
        return self._by_task[task.name]

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        self._experts = [None if seed is None else self._expert(task) for seed in episode_seeds]

    def reset_slots(self, task: TaskSpec, seeds: dict[int, int | None]) -> None:
        for row, seed in seeds.items():
            self._experts[row] = None if seed is None else self._expert(task)

    def select_action(self, batch: dict[str, Any]) -> np.ndarray:
        if STATE_KEY not in batch:
            raise UserError(
                f"policy=metaworld_expert needs '{STATE_KEY}' in the batch; keep it in the env's features_map"
            )
        states = np.asarray(batch[STATE_KEY], dtype=np.float64)
        with warnings.catch_warnings():
            # The experts warn that their gains exceed the action range; the env clips, as intended.
            warnings.simplefilter("ignore", UserWarning)
            rows = zip(self._experts, states, strict=True)
            actions = [np.zeros(4) if e is None else e.get_action(state) for e, state in rows]
        return np.stack(actions).astype(np.float32)

    def fork(self) -> MetaWorldExpertPolicy:
        return MetaWorldExpertPolicy()
