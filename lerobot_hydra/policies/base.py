"""The interface the runner drives, and the base of every policy config."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lerobot_hydra.envs.base import EnvConfig, TaskSpec


class Policy(Protocol):
    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        """Start a batch of episodes of `task`; entry i is the seed of sub-env i's episode (None: idle)."""

    def select_action(self, batch: dict[str, Any]) -> Any:
        """Actions for the whole batch, shape (batch, action_dim), as a tensor or an array."""

    def fork(self) -> Policy:
        """A policy with its own per-episode state that shares this one's weights (for parallel tasks)."""


class RowResettablePolicy(Policy, Protocol):
    """A policy whose per-episode state is per batch row. It gets each sub-env's next episode as soon as the
    previous one ends; any other policy starts a new batch only when every episode of the current one has ended."""

    def reset_slots(self, task: TaskSpec, seeds: dict[int, int]) -> None:
        """Start new episodes on the given batch rows only (row -> episode seed); the other rows continue."""


@dataclass
class PolicyConfig:
    """Base of every policy config. Subclasses are dataclasses named by `_target_` in `conf/policy/*.yaml`."""

    @classmethod
    def check_env(cls, env_cls: type) -> None:
        """Raise a UserError when this family cannot drive envs of `env_cls`; run before anything is built."""

    def reads(self, env: EnvConfig) -> set[str] | None:
        """The observation keys (as the env's `pre` processors name them) this policy reads from `env`; None: it
        may read any. Known before any simulator starts, so that the env computes only these."""
        return None

    def build(self, env: EnvConfig, device: str) -> Policy:
        """`device` is the top-level setting as configured (`auto` included; see `gl.resolve_device`)."""
        raise NotImplementedError

    def identity(self) -> dict[str, Any] | None:
        """What the policy's weights are (a Hub commit, a hash of a checkpoint's files), found without building
        the policy; part of the run's fingerprint, so a resume or shard with other weights is refused. None for
        a policy without a checkpoint."""
        return None

    def distributions(self) -> list[str]:
        """Installed distributions (pip names) that compute this policy's actions, recorded in the provenance."""
        return []

    def resolved_device(self, device: str) -> str:
        """The device the policy computes on, given the top-level `device` setting (numpy policies: the CPU)."""
        return "cpu"
