"""A chunked policy's batch row in real time, under LeRobot's async-inference rules (docs/timing.md).

On a robot, LeRobot's async client (`lerobot.async_inference.robot_client`) executes its action queue while the
policy server computes the next chunk. Each action carries a timestep (the index of the action in the episode). The
client asks for a chunk once the queue holds `chunk_size_threshold` of a chunk or less; when the chunk arrives, its
actions whose timestep has already been executed are dropped, those whose timestep is still queued are blended with
the queued one by the aggregate function, and the queue becomes the chunk's remaining actions. When the queue is
empty the robot does not move. Here the wall clock is the row's control steps: a chunk asked for at a step, from that
step's observation, joins the queue `latency` steps later (the latency in ms at the env's fps, rounded up), and a row
with an empty queue holds: it repeats its last action (or sends the env's no-op, `hold=noop`) and its timestep does
not advance, as the robot's does not.

With `join=rtc` a chunk joins as in LeRobot's real-time chunking engine (`lerobot.rollout.inference.rtc`): it is
computed with guidance towards the row's leftover (the queued actions at the request), assuming the delay that
engine assumes, the largest latency so far in steps, and on arrival it replaces the queue, its first `latency`
actions dropped (the time that passed, whether the row executed or held meanwhile; no blending). Three differences
from the engine, each so that an episode stays a function of its seed, task and index alone or of what it observes:
the largest latency is the episode's (the engine's tracker spans its whole life), the first chunk is awaited, and a
chunk asked for with an empty queue is computed unguided (the engine guides it towards a leftover of zeros).

Two choices the robot leaves open are fixed here. One chunk is in flight per row at a time (LeRobot's server
computes one at a time and drops the observations sent meanwhile). A chunk asked for after the action of timestep t
starts at timestep t + 1 (LeRobot's client labels the observation with t itself, so the first action of every chunk
but the first is stale on arrival); with no latency and a threshold of 0 a row then runs exactly as in lockstep.
And an episode's first chunk, asked for with nothing to execute, is awaited: the episode starts when it arrives.
"""

from __future__ import annotations

import math
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_hydra.schemas.clock import AGGREGATE_WEIGHTS, ClockConfig


@dataclass(frozen=True)
class Clock:
    """`eval.clock` at an env's control rate."""

    config: ClockConfig
    fps: float

    @property
    def real_time(self) -> bool:
        return self.config.real_time

    def steps(self, ms: float) -> int:
        """Control steps that pass while an inference of `ms` milliseconds computes: the new chunk joins the queue
        at the first control step at or after its arrival."""
        return max(0, math.ceil(ms * self.fps / 1000.0 - 1e-9))


def blend(name: str, old: Any, new: Any) -> Any:
    """LeRobot's aggregate function `name` of a queued action and the new chunk's action of its timestep."""
    weights = AGGREGATE_WEIGHTS[name]
    if weights is None:
        return new
    w_old, w_new = weights
    return w_old * old + w_new * new


MEASURED = "eval.clock.mode=measured: its latencies are this device's wall times"


@dataclass
class RowTiming:
    """What an episode's inferences cost: recorded with it (core/records.py)."""

    inferences: int = 0
    latency_steps: list[int] = field(default_factory=list)  # control steps each inference took (lockstep: 0)
    latency_ms: list[float] = field(default_factory=list)  # the latency each was charged (modeled or measured)
    infer_ms: list[float] = field(default_factory=list)  # the wall time of the forward pass it was part of
    held_steps: int = 0  # steps the row held its last action, its queue empty while a chunk was in flight
    not_reproducible: str | None = None  # why the episode cannot be replayed (measured latency), else None

    def add(self, steps: int, charged_ms: float | None, wall_ms: float) -> None:
        self.inferences += 1
        self.latency_steps.append(steps)
        if charged_ms is not None:
            self.latency_ms.append(round(charged_ms, 3))
        self.infer_ms.append(round(wall_ms, 3))

    def fields(self) -> dict[str, Any]:
        return {
            "inferences": self.inferences,
            "latency_steps": list(self.latency_steps),
            "latency_ms": list(self.latency_ms) if self.latency_ms else None,
            "infer_ms": list(self.infer_ms),
            "held_steps": self.held_steps,
            "not_reproducible": self.not_reproducible,
        }


def latency_draws(clock: ClockConfig, seed: int, task: str) -> np.random.Generator | None:
    """The generator of a modeled episode's latencies: a function of its seed (the run's seed + its index) and task."""
    if clock.mode != "modeled" or clock.distribution == "fixed":
        return None
    return np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(task.encode())])


class TimedRow:
    """One row's episode in real time (see the module docstring); `step` once per control step."""

    def __init__(self, clock: Clock, seed: int, task: str) -> None:
        self.clock = clock
        self.queue: deque[tuple[int, Any]] = deque()  # (timestep, action), timesteps increasing
        self.latest = -1  # the timestep of the last executed action
        self.chunk_size = 0  # the longest chunk received (LeRobot's action_chunk_size)
        self.flight: tuple[int, int, list[Any]] | None = None  # (steps until it joins, first timestep, actions)
        self.last: Any = None
        self.timing = RowTiming(not_reproducible=MEASURED if clock.config.mode == "measured" else None)
        self.draws = latency_draws(clock.config, seed, task)
        self.held = False  # whether the last `pop` held, the queue empty

    def guidance(self) -> tuple[int, list[Any]] | None:
        """join=rtc: (the delay in steps the guidance assumes, the leftover it is guided towards) for a chunk asked
        for now; None: nothing to guide towards (an empty queue) or join=aggregate."""
        if self.clock.config.join != "rtc" or not self.queue:
            return None
        return self.clock.steps(max(self.timing.latency_ms, default=0.0)), [a for _, a in self.queue]

    def wants_chunk(self) -> bool:
        """Whether the row asks for a chunk at this step, from this step's observation (after `arrive`)."""
        if self.flight is not None:
            return False
        if not self.chunk_size:
            return True
        return len(self.queue) / self.chunk_size <= self.clock.config.chunk_size_threshold

    def arrive(self) -> None:
        """At the start of a step: the chunk in flight joins the queue if it is due."""
        if self.flight is not None and self.flight[0] <= 0:
            _, first, actions = self.flight
            self.flight = None
            self.join(first, actions)

    def request(self, actions: list[Any], wall_ms: float) -> None:
        """A chunk computed from this step's observation in `wall_ms`; it joins after its latency."""
        charged = round(self._latency_ms(wall_ms), 3)  # as recorded: the steps follow from the record
        # An episode's first chunk is awaited (see the module docstring).
        steps = self.clock.steps(charged) if self.chunk_size else 0
        self.timing.add(steps, charged, wall_ms)
        first = self.latest + 1
        if self.clock.config.join == "rtc":
            self.chunk_size = max(self.chunk_size, len(actions))
            actions = actions[steps:]  # LeRobot's RTC engine drops the latency's worth, executed or not
        if steps == 0:
            self.join(first, actions)
        else:
            self.flight = (steps, first, actions)

    def join(self, first: int, actions: list[Any]) -> None:
        """LeRobot's async rule: passed timesteps dropped, queued ones blended, the queue becomes the chunk's rest.
        RTC's: the chunk (its latency's worth already dropped) replaces the queue."""
        if self.clock.config.join == "rtc":
            self.queue = deque(enumerate(actions, start=self.latest + 1))
            return
        self.chunk_size = max(self.chunk_size, len(actions))
        queued = dict(self.queue)
        name = self.clock.config.aggregate
        self.queue = deque(
            (t, blend(name, queued[t], a) if t in queued else a)
            for t, a in enumerate(actions, start=first)
            if t > self.latest
        )

    def pop(self) -> Any:
        """This step's action (the queue's next, or the last one held), after which a control step passes."""
        self.held = not self.queue
        if self.queue:
            self.latest, self.last = self.queue.popleft()
        else:
            assert self.last is not None, "a row holds only after its first chunk"
            self.timing.held_steps += 1
        if self.flight is not None:
            due, first, actions = self.flight
            self.flight = (due - 1, first, actions)
        return self.last

    def _latency_ms(self, wall_ms: float) -> float:
        config = self.clock.config
        if config.mode == "measured":
            return wall_ms
        if self.draws is None:
            return config.latency_ms
        if config.distribution == "uniform":
            low = max(0.0, config.latency_ms - config.spread_ms)
            return float(self.draws.uniform(low, config.latency_ms + config.spread_ms))
        return max(0.0, float(self.draws.normal(config.latency_ms, config.spread_ms)))


def noop_rows(rows: Sequence[TimedRow | None]) -> list[int]:
    """The rows that held at this step on a clock with `hold=noop`: the env's no-op goes to them."""
    return [i for i, row in enumerate(rows) if row is not None and row.held and row.clock.config.hold == "noop"]
