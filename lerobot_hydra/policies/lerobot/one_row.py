"""A LeRobot policy of a family whose noise has no per-row hook (see noise.py), run one row at a time.

Each batch row gets its own fork of the policy (its own action queue, observation queue and processors; the same
weight tensors) and runs as a batch of one with torch's global generators swapped to its own state, seeded from
its episode, so its actions are those of its episode alone, and a finished row starts its next episode at once.
Exact, and slower by up to the batch size. The swap is done under the inference lock that the lanes share, as the
global generators are the process's. On a real-time `eval.clock` each row's queue is a `clock.TimedRow`, filled
with the chunks its fork computes (row_chunks.py), postprocessed; in lockstep each chunk's wall time is recorded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.policies.base import RunsOnClock
from lerobot_hydra.policies.clock import Clock, RowTiming, TimedRow, noop_rows
from lerobot_hydra.policies.lerobot.noise import GlobalRngState, row_seed
from lerobot_hydra.policies.lerobot.row_chunks import action_queue, chunk_now, observe_only
from lerobot_hydra.policies.lerobot.runtime import LeRobotPolicy


@dataclass
class _Row:
    policy: LeRobotPolicy
    rng: GlobalRngState
    idle: bool = True
    timed: TimedRow | None = None  # a real-time eval.clock: the row's queue
    timing: RowTiming = field(default_factory=RowTiming)  # lockstep: its chunks' wall times


def row_slice(batch: dict[str, Any], row: int, size: int) -> dict[str, Any]:
    """Row `row` of the env side's batch, as a batch of one: arrays, tensors and lists of `size` rows are cut."""
    return {
        key: value[row : row + 1]
        if not isinstance(value, str) and hasattr(value, "__len__") and len(value) == size
        else value
        for key, value in batch.items()
    }


class RowwisePolicy(RunsOnClock):
    def __init__(self, base: LeRobotPolicy) -> None:
        assert base.noise is None, "a policy with per-row noise hooks runs batched"
        self.base = base
        self.rows: list[_Row] = []
        self.clock: Clock | None = None

    def use_clock(self, clock: Clock) -> None:
        if clock.real_time and clock.config.join == "rtc":  # clocked.py refuses it for every family run this way
            kind = self.base.policy.config.type
            raise UserError(
                f"eval.clock.join=rtc: this lerobot's {kind} has no per-row noise hook here, so its rows run one at a "
                "time, without guidance; install the lerobot that lerobot_hydra pins, or use eval.clock.join=aggregate"
            )
        self.clock = clock if clock.real_time else None

    def row_timing(self, row: int) -> dict[str, Any] | None:
        state = self.rows[row]
        return (state.timed.timing if state.timed is not None else state.timing).fields()

    def noop_rows(self) -> list[int]:
        return noop_rows([row.timed for row in self.rows])

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        while len(self.rows) < len(episode_seeds):
            self.rows.append(_Row(self.base.fork(), GlobalRngState(self.base.device)))
        del self.rows[len(episode_seeds) :]
        with self.base.lock:
            for row, seed in zip(self.rows, episode_seeds, strict=True):
                self._start(row, task, seed)

    def reset_slots(self, task: TaskSpec, seeds: dict[int, int | None]) -> None:
        """Each row is a policy of its own: resetting it touches no other row."""
        with self.base.lock:
            for i, seed in seeds.items():
                self._start(self.rows[i], task, seed)

    def _start(self, row: _Row, task: TaskSpec, seed: int | None) -> None:
        row.idle = seed is None
        row.timing = RowTiming()
        row.timed = TimedRow(self.clock, seed, task.name) if self.clock is not None and seed is not None else None
        if not row.idle:
            row.policy.reset(task, [seed])
            row.rng.seed(row_seed(seed))

    def select_action(self, batch: dict[str, Any]) -> Any:
        import torch

        actions: list[Any] = [None] * len(self.rows)
        for i, row in enumerate(self.rows):
            if row.idle:
                continue  # its sub-env is not stepped: it gets a placeholder below
            one = row_slice(batch, i, len(self.rows))
            with self.base.lock, row.rng.active():
                actions[i] = torch.as_tensor(self._act(row, one)).reshape(1, -1)
        template = next(a for a in actions if a is not None)
        return torch.cat([torch.zeros_like(template) if a is None else a for a in actions])

    @staticmethod
    def _act(row: _Row, one: dict[str, Any]) -> Any:
        timed = row.timed
        if timed is None:
            asks = not action_queue(row.policy)
            start = time.perf_counter()
            action = row.policy.select_action(one)
            if asks:
                row.timing.add(0, None, 1000.0 * (time.perf_counter() - start))
            return action
        timed.arrive()
        if timed.wants_chunk():
            start = time.perf_counter()
            chunk = chunk_now(row.policy, one)
            timed.request(list(chunk), 1000.0 * (time.perf_counter() - start))
        else:
            observe_only(row.policy, one)
        return timed.pop()

    def fork(self) -> RowwisePolicy:
        forked = RowwisePolicy(self.base.fork())
        forked.clock = self.clock
        return forked
