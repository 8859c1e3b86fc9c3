"""A stateless controller given as an importable function (a benchmark's scripted policy) as a policy.

`function` maps one row's observation, the named `inputs` concatenated in order (as float64), to its action:
`lerobot_env_so101.scripted.scripted_reach_close(obs, action_scale=...)`, for instance. Being a function of the
current observation alone, it has no per-episode state: every row starts and ends its episodes on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.policies.base import PolicyConfig, RowResettablePolicy


def resolve_function(path: str) -> Callable[..., Any]:
    import importlib

    module_name, _, name = path.rpartition(".")
    try:
        function = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise UserError(f"policy.function '{path}' cannot be imported ({err}); give module.function") from err
    if not callable(function):
        raise UserError(f"policy.function '{path}' is not callable")
    return function


@dataclass
class FunctionPolicyConfig(PolicyConfig):
    # module.function: (observation row as a 1-D float64 array, **kwargs) -> action row.
    function: str = ""
    # The observation keys (as the env's `pre` processors name them) concatenated into the row, in this order.
    inputs: list[str] = field(default_factory=lambda: ["observation.state"])
    # Keyword arguments of every call.
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.function:
            raise UserError("policy.function is required, e.g. lerobot_env_so101.scripted.scripted_reach_close")
        if not self.inputs:
            raise UserError("policy.inputs must name at least one observation key, e.g. [observation.state]")

    def reads(self, env: EnvConfig) -> set[str]:
        return set(self.inputs)

    def resets_rows(self) -> bool:
        return True

    def build(self, env: EnvConfig, device: str) -> FunctionPolicy:
        _, action_space = env.spaces(env.tasks()[0])
        return FunctionPolicy(resolve_function(self.function), list(self.inputs), dict(self.kwargs), action_space)

    def distributions(self) -> list[str]:
        from lerobot_hydra.envs.gym import distributions_shipping

        return distributions_shipping(self.function.split(".")[0])


class FunctionPolicy(RowResettablePolicy):
    def __init__(self, function: Callable[..., Any], inputs: list[str], kwargs: dict[str, Any], action_space: Any):
        self.function, self.inputs, self.kwargs = function, inputs, kwargs
        self.action_space = action_space
        self._active: list[bool] = []

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        self._active = [seed is not None for seed in episode_seeds]

    def reset_slots(self, task: TaskSpec, seeds: dict[int, int | None]) -> None:
        for row, seed in seeds.items():
            self._active[row] = seed is not None

    def select_action(self, batch: dict[str, Any]) -> np.ndarray:
        missing = [key for key in self.inputs if key not in batch]
        if missing:
            given = ", ".join(sorted(k for k in batch if k.startswith("observation."))) or "none"
            raise UserError(f"policy.inputs names {', '.join(missing)}, which the env does not give; it gives {given}")
        rows = np.concatenate([as_numpy(batch[key]).reshape(len(self._active), -1) for key in self.inputs], axis=1)
        idle = np.zeros(self.action_space.shape, self.action_space.dtype)
        actions = [
            np.asarray(self.function(row, **self.kwargs), dtype=self.action_space.dtype) if active else idle
            for row, active in zip(rows.astype(np.float64), self._active, strict=True)
        ]
        return np.stack(actions)

    def fork(self) -> FunctionPolicy:
        return FunctionPolicy(self.function, self.inputs, self.kwargs, self.action_space)


def as_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().to("cpu").numpy()
    return np.asarray(value)
