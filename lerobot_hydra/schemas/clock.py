"""`eval.clock`: whether time passes while the policy computes (docs/timing.md).

lockstep (the default) is every run so far: the simulator waits for the policy. modeled and measured are real time:
each inference costs a latency (modeled: `latency_ms`, fixed or drawn per episode; measured: its wall time on this
device), turned into control steps at the env's fps, and the rows execute their queued actions meanwhile under
LeRobot's async-inference rules (policies/clock.py). A new chunk joins a row's queue by LeRobot's aggregate
functions, or by real-time chunking (RTC): computed with guidance towards the row's leftover, it replaces the queue.
"""

from __future__ import annotations

from dataclasses import dataclass

from lerobot_hydra.core.errors import UserError, did_you_mean

MODES = ("lockstep", "modeled", "measured")
DISTRIBUTIONS = ("fixed", "uniform", "normal")
# LeRobot's async-inference aggregate functions (lerobot.async_inference.configs.AGGREGATE_FUNCTIONS), by name:
# the weights of the queued action and of the new chunk's action of the same timestep; latest_only: the new one.
AGGREGATE_WEIGHTS: dict[str, tuple[float, float] | None] = {
    "weighted_average": (0.3, 0.7),
    "latest_only": None,
    "average": (0.5, 0.5),
    "conservative": (0.7, 0.3),
}
JOINS = ("aggregate", "rtc")
HOLDS = ("repeat", "noop")


@dataclass
class ClockConfig:
    # lockstep: the simulator waits for the policy (as lerobot-eval). modeled: each inference takes `latency_ms`.
    # measured: each inference takes its wall time on this device (not reproducible).
    mode: str = "lockstep"
    # modeled: milliseconds per inference (the median of `distribution`).
    latency_ms: float = 0.0
    # modeled: fixed, or drawn per inference from uniform (latency_ms +- spread_ms) or normal (sd spread_ms, >= 0),
    # seeded by (seed, task, episode index).
    distribution: str = "fixed"
    spread_ms: float = 0.0
    # Real time: a row asks for its next chunk once its queue holds this fraction of a chunk or less (LeRobot's
    # chunk_size_threshold); 0: only when the queue is empty.
    chunk_size_threshold: float = 0.5
    # join=aggregate: LeRobot's aggregate_fn_name, how a new action joins the queued action of the same timestep.
    aggregate: str = "weighted_average"
    # Real time, a row whose queue ran dry while its chunk is in flight: repeat (its last action again) or noop
    # (the env's action that leaves the robot as it is: envs with delta end-effector control, such as LIBERO).
    hold: str = "repeat"
    # Real time: how a new chunk joins the queue. aggregate: each new action is blended with the queued action of its
    # timestep by `aggregate`. rtc: LeRobot's real-time chunking (SmolVLA, pi0, pi0.5): the chunk is computed with
    # guidance towards the queue's leftover and replaces it (policy.rtc tunes the guidance).
    join: str = "aggregate"

    @property
    def real_time(self) -> bool:
        return self.mode != "lockstep"


_REAL_TIME_ONLY = ("chunk_size_threshold", "join", "aggregate", "hold")
_MODELED_ONLY = ("latency_ms", "distribution", "spread_ms")


def check_clock(clock: ClockConfig) -> None:
    """Every `eval.clock` setting used or refused, in one line, before anything runs."""
    if clock.mode not in MODES:
        raise UserError(
            f"eval.clock.mode={clock.mode!r} is not one of {', '.join(MODES)}{did_you_mean(clock.mode, list(MODES))}"
        )
    defaults = ClockConfig()
    unused = [k for k in _MODELED_ONLY if clock.mode != "modeled" and getattr(clock, k) != getattr(defaults, k)]
    unused += [k for k in _REAL_TIME_ONLY if not clock.real_time and getattr(clock, k) != getattr(defaults, k)]
    if unused:
        need = "modeled" if unused[0] in _MODELED_ONLY else "modeled or measured"
        raise UserError(
            f"eval.clock.{unused[0]} is used only with eval.clock.mode={need}, not {clock.mode}; "
            f"add eval.clock.mode={need.split()[0]} or drop it"
        )
    if clock.latency_ms < 0 or clock.spread_ms < 0:
        key = "latency_ms" if clock.latency_ms < 0 else "spread_ms"
        raise UserError(f"eval.clock.{key} must be 0 or more milliseconds, got {getattr(clock, key)}")
    if clock.distribution not in DISTRIBUTIONS:
        raise UserError(
            f"eval.clock.distribution={clock.distribution!r} is not one of {', '.join(DISTRIBUTIONS)}"
            f"{did_you_mean(clock.distribution, list(DISTRIBUTIONS))}"
        )
    if clock.distribution == "fixed" and clock.spread_ms:
        raise UserError("eval.clock.spread_ms needs eval.clock.distribution=uniform or normal (fixed has no spread)")
    if not 0.0 <= clock.chunk_size_threshold <= 1.0:
        raise UserError(
            "eval.clock.chunk_size_threshold must lie in [0, 1] (a fraction of a chunk), "
            f"got {clock.chunk_size_threshold}"
        )
    if clock.aggregate not in AGGREGATE_WEIGHTS:
        names = list(AGGREGATE_WEIGHTS)
        raise UserError(
            f"eval.clock.aggregate={clock.aggregate!r} is not one of LeRobot's aggregate functions: "
            f"{', '.join(names)}{did_you_mean(clock.aggregate, names)}"
        )
    if clock.join not in JOINS:
        raise UserError(
            f"eval.clock.join={clock.join!r} is not one of {', '.join(JOINS)}{did_you_mean(clock.join, list(JOINS))}"
        )
    if clock.join == "rtc" and clock.aggregate != defaults.aggregate:
        raise UserError(
            "eval.clock.aggregate is used only with eval.clock.join=aggregate: under join=rtc the guided chunk "
            "replaces the queue; drop eval.clock.aggregate"
        )
    if clock.hold not in HOLDS:
        raise UserError(
            f"eval.clock.hold={clock.hold!r} is not one of {', '.join(HOLDS)}{did_you_mean(clock.hold, list(HOLDS))}"
        )
