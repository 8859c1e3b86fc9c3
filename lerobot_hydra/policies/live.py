"""`policy=live`: a policy object handed over in memory by the Python API (`lerobot_hydra.evaluate`,
`Evaluator`) instead of a checkpoint: a LeRobot `PreTrainedPolicy` with its pre/post processors, run exactly as
its checkpoint would be (policies/lerobot/config.py `runtime_for`), or any object meeting the `Policy` protocol,
run as it is."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import EnvConfig
from lerobot_hydra.policies.base import Policy, PolicyConfig, RowResettablePolicy

PROTOCOL_METHODS = ("reset", "select_action", "fork", "finish")


def is_lerobot_policy(obj: Any) -> bool:
    try:
        from lerobot.policies.pretrained import PreTrainedPolicy
    except ImportError:
        return False
    return isinstance(obj, PreTrainedPolicy)


@dataclass
class LivePolicy:
    """The object evaluated, with the processors of a LeRobot policy (None for a `Policy`)."""

    policy: Any
    preprocessor: Any = None
    postprocessor: Any = None

    @classmethod
    def of(cls, policy: Any, preprocessor: Any = None, postprocessor: Any = None) -> LivePolicy:
        """Checks what the API was handed; one-line errors."""
        if is_lerobot_policy(policy):
            if preprocessor is None or postprocessor is None:
                raise UserError(
                    f"a LeRobot {policy.config.type} policy needs its processors: pass preprocessor= and "
                    "postprocessor= (lerobot.policies.factory.make_pre_post_processors makes them)"
                )
            return cls(policy, preprocessor, postprocessor)
        if preprocessor is not None or postprocessor is not None:
            raise UserError("preprocessor= and postprocessor= go with a LeRobot PreTrainedPolicy only")
        missing = [m for m in PROTOCOL_METHODS if not callable(getattr(policy, m, None))]
        if missing:
            raise UserError(
                f"cannot evaluate a {type(policy).__name__}: it is neither a LeRobot PreTrainedPolicy nor a "
                f"lerobot_hydra Policy (missing {', '.join(missing)}; see lerobot_hydra/policies/base.py)"
            )
        return cls(policy)

    @property
    def is_lerobot(self) -> bool:
        return self.preprocessor is not None

    @property
    def device(self) -> str:
        """Where the policy's weights are (a `Policy` without torch weights: the CPU)."""
        parameters = getattr(self.policy, "parameters", None)
        first = next(iter(parameters()), None) if callable(parameters) else None
        return "cpu" if first is None else str(first.device)


@dataclass
class LivePolicyConfig(PolicyConfig):
    # Env observation key -> the key a LeRobot policy reads, e.g. {observation.image: observation.images.top}.
    rename_map: dict[str, str] | None = None
    # LeRobot policy cameras the env does not have, shown as blank images (pi0, pi0.5, SmolVLA).
    blank_cameras: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.live: LivePolicy | None = None  # the policy object of one evaluation (`holding`), not a setting

    def holding(self, live: LivePolicy) -> LivePolicyConfig:
        """A copy of this config for one evaluation of `live` (the Python API's); this one stays empty."""
        config = dataclasses.replace(self)
        config.live = live
        return config

    def resets_rows(self) -> bool:
        if self.live is None:
            return False
        if self.live.is_lerobot:
            from lerobot_hydra.policies.lerobot.rows import PER_ROW_FAMILIES

            return self.live.policy.config.type in PER_ROW_FAMILIES
        return RowResettablePolicy in type(self.live.policy).__mro__

    def reads(self, env: EnvConfig) -> set[str] | None:
        if self.live is None or not self.live.is_lerobot:
            return None
        return set(self._observation_keys(env))

    def _observation_keys(self, env: EnvConfig) -> dict[str, str]:
        from lerobot_hydra.policies.lerobot.config import match_observations

        assert self.live is not None
        policy = self.live.policy
        name = f"live {policy.config.type} policy"
        return match_observations(name, policy.config, env, self.rename_map or {}, self.blank_cameras)

    def build(self, env: EnvConfig, device: str) -> Policy:
        if self.live is None:
            raise UserError(
                "policy=live evaluates a policy object from Python (lerobot_hydra.evaluate, Evaluator); "
                "on the command line choose a checkpoint, e.g. policy=act policy.path=<dir>"
            )
        if not self.live.is_lerobot:
            if self.rename_map or self.blank_cameras:
                raise UserError("policy.rename_map and policy.blank_cameras apply to a LeRobot policy only")
            return self.live.policy  # type: ignore[no-any-return]
        from lerobot_hydra.policies.lerobot.config import runtime_for

        live = self.live
        keys = self._observation_keys(env)
        return runtime_for(live.policy, live.preprocessor, live.postprocessor, live.device, False, keys)

    def distributions(self) -> list[str]:
        return ["lerobot"] if self.live is not None and self.live.is_lerobot else []

    def resolved_device(self, device: str) -> str:
        return "cpu" if self.live is None else self.live.device
