"""The policy contract: the config a `conf/policy/*.yaml` names, and the object it builds for the runner.

Every extension area follows one rule: `_target_` names a config dataclass, its `build()` makes the object the
rollout drives, and that object satisfies a Protocol of the area's base module. For policies:
`_target_` -> a `PolicyConfig` subclass -> `build(env, device)` -> a `Policy`.

Capabilities are declared, never discovered: a policy class states what it can do by the Protocol it subclasses.
`Policy` is the minimum (batches start and end together); a class that subclasses `RowResettablePolicy` says
its per-episode state is per batch row, and the runner then starts a sub-env's next episode as soon as its
previous one ends (`resets_rows`). A class that only happens to have a `reset_slots` method gets lockstep.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from lerobot_hydra.envs.base import EnvConfig, TaskSpec
    from lerobot_hydra.policies.clock import Clock
    from lerobot_hydra.schemas.clock import ClockConfig


class Policy(Protocol):
    """What the runner drives. Subclass it (or `RowResettablePolicy`) to declare what the class provides."""

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        """Start a batch of episodes of `task`; entry i is the seed of sub-env i's episode (None: idle)."""
        ...

    def select_action(self, batch: dict[str, Any]) -> Any:
        """Actions for the whole batch, shape (batch, action_dim), as a tensor or an array."""
        ...

    def fork(self) -> Policy:
        """A policy with its own per-episode state that shares this one's weights (for parallel tasks)."""
        ...

    def finish(self) -> None:
        """Every episode of the run ran (called once, at the run's true end, on the policy built for the run, not
        on its forks): a remote policy tells its server and disconnects (serving/client.py); by default there is
        nothing to do."""

    def close(self) -> None:
        """The process is done with the policy, but the run goes on elsewhere (a round of a sequential sweep, a
        stopped run): a remote policy disconnects without telling its server the run completed; by default there
        is nothing to do. Called instead of `finish`, once."""


class RowResettablePolicy(Policy, Protocol):
    """A policy whose per-episode state is per batch row (and per task: rows of one batch may run different
    tasks, each row's `task` text in the batch). It gets each sub-env's next episode as soon as the previous one
    ends; any other policy starts a new batch only when every episode of the current one has ended."""

    def reset_slots(self, task: TaskSpec, seeds: dict[int, int | None]) -> None:
        """Start new episodes of `task` on the given batch rows only (row -> episode seed); the other rows
        continue. A seed of None makes the row idle: its action is never applied, so compute nothing for it."""
        ...


class DeclaresReads(Policy, Protocol):
    """A policy that knows, per batch row, whether its next `select_action` reads the observation the coming step
    returns (a chunked policy reads one only when its row's action queue has run out). The simulators then draw
    their cameras only for the rows that will be read (`eval.render=read`); a policy that does not subclass this
    has every camera drawn at every step."""

    def reads_next(self) -> list[bool]:
        """Entry i: whether the next `select_action` reads row i's observation from the step about to be taken
        (asked right after `select_action`; an idle row: False). A row read by no later call either may be
        False, but a row whose observation any later call reads, in its history or at once, must be True."""
        ...


class RunsOnClock(RowResettablePolicy, Protocol):
    """A chunked policy whose rows can run in real time (`eval.clock`, policies/clock.py), and that reports what
    each row's inferences cost (in lockstep too: their wall time)."""

    def use_clock(self, clock: Clock) -> None:
        """Run every row on `clock` from the next `reset` on (called once, after the policy is built)."""
        ...

    def row_timing(self, row: int) -> dict[str, Any] | None:
        """The timing of row `row`'s episode, which just ended (`RowTiming.fields`), asked before the row is
        reset; None: nothing is known."""
        ...

    def noop_rows(self) -> list[int]:
        """The rows whose last `select_action` held under `eval.clock.hold=noop` (`clock.noop_rows`): the runner
        sends them the env's no-op in place of their action."""
        ...


def rtc_join_refusal(clock: ClockConfig, policy: str) -> str | None:
    """`eval.clock.join=rtc` refused for a chunked policy without LeRobot's real-time chunking."""
    if clock.real_time and clock.join == "rtc":
        return (
            f"eval.clock.join=rtc: {policy} has no real-time chunking (LeRobot's SmolVLA, pi0 and pi0.5 have it, "
            "evaluated in this process); use eval.clock.join=aggregate"
        )
    return None


def runs_on_clock(policy: Policy) -> bool:
    """Whether `policy`'s class declared `RunsOnClock` (subclasses it)."""
    return RunsOnClock in type(policy).__mro__


def declares_reads(policy: Policy) -> bool:
    """Whether `policy`'s class declared `DeclaresReads` (subclasses it)."""
    return DeclaresReads in type(policy).__mro__


def resets_rows(policy: Policy) -> bool:
    """Whether `policy`'s class declared `RowResettablePolicy` (subclasses it)."""
    return RowResettablePolicy in type(policy).__mro__


@dataclass
class PolicyConfig:
    """Base of every policy config. Subclasses are dataclasses named by `_target_` in `conf/policy/*.yaml`; their
    fields are the YAML's keys (checked against them before anything is built)."""

    # This family's settings that never change an outcome (besides `device`): left out of the run's fingerprint.
    OUTCOME_NEUTRAL: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def check_env(cls, env_cls: type) -> None:
        """Raise a UserError when this family cannot drive envs of `env_cls`; run before anything is built."""

    def reads(self, env: EnvConfig) -> set[str] | None:
        """The observation keys (as the env's `pre` processors name them) this policy reads from `env`; None: it
        may read any. Known before any simulator starts, so that the env computes only these."""
        return None

    def resets_rows(self) -> bool:
        """Whether the policy this config builds resets its batch rows one at a time (its class subclasses
        `RowResettablePolicy`), known before it is built, so that the workers can start building simulators for
        batches that mix tasks; False where it is not known (the workers then plan for batches of one task)."""
        return False

    def clock_refusal(self, clock: ClockConfig) -> str | None:
        """Why this policy cannot run on `clock` and what to use instead, one sentence naming the setting; None: it
        can (a real-time clock: its policy subclasses `RunsOnClock`). Known before anything is built."""
        if not clock.real_time:
            return None
        return (
            f"eval.clock.mode={clock.mode}: {type(self).__name__} hands the rollout one action per step, not chunks; "
            "use eval.clock.mode=lockstep, or a chunked policy (a LeRobot checkpoint of a chunked family, "
            "policy=metaworld_expert policy.chunk=10, or a served policy)"
        )

    def family(self) -> str | None:
        """The LeRobot policy type of this policy's checkpoint (config.json's `type`), read without importing
        LeRobot; None for a policy that is not a LeRobot checkpoint."""
        return None

    def lerobot_config(self) -> Any:
        """The LeRobot policy config (config.json as LeRobot's class) that envs adapt their processors to, as
        lerobot-eval does (`EnvConfig.for_policy`); None for a policy that is not a LeRobot checkpoint. It imports
        LeRobot (seconds), so envs that only need the family ask `family()`."""
        return None

    def build(self, env: EnvConfig, device: str) -> Policy:
        """The policy for `env` (the env as configured). `device` is the top-level setting as the caller passes it
        (`auto` included; see `gl.resolve_device`). Runs once per run, while the workers start."""
        raise NotImplementedError

    def completed_unbuilt(self) -> None:
        """The run had no episode left to run (a complete shard run again), so no policy was built. A remote
        policy tells its server all the same that this run is complete (serving/client.py)."""

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
