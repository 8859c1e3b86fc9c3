"""MetaWorld's scripted experts as a chunked policy (`policy=metaworld_expert policy.chunk=N`): from one state an
expert plans N actions by moving the hand in imagination (MetaWorld moves its mocap by a/100 per step; an object
held, the gripper closed on it, moves with the hand) and asking itself again at each imagined state. It then
behaves as a chunked model does, open loop for the actions of a chunk, so it can run on a real-time `eval.clock`
and show what latency costs without trained weights (docs/timing.md)."""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.policies.base import RunsOnClock
from lerobot_hydra.policies.clock import Clock, RowTiming, TimedRow, noop_rows

STATE_KEY = "observation.environment_state"
HAND, OBJECT = slice(0, 3), slice(4, 7)
ACTION_SCALE = 1.0 / 100  # MetaWorld's SawyerXYZEnv.action_scale
HELD = 0.07  # as the experts' own test of an object in the hand


def plan(expert: Any, state: np.ndarray, n: int) -> list[np.ndarray]:
    """`n` actions of `expert` from `state`, each from the state the previous ones would lead to."""
    imagined = np.array(state, dtype=np.float64)
    actions = []
    for _ in range(n):
        action = np.asarray(expert.get_action(imagined), dtype=np.float32)
        actions.append(action)
        move = np.clip(action[:3], -1.0, 1.0) * ACTION_SCALE
        held = action[3] > 0 and np.linalg.norm(imagined[HAND] - imagined[OBJECT]) < HELD
        imagined[HAND] += move
        if held:
            imagined[OBJECT] += move
    return actions


class _Row:
    def __init__(self, expert: Any, clock: Clock | None, seed: int, task: str) -> None:
        self.expert = expert
        self.timed = TimedRow(clock, seed, task) if clock is not None else None
        self.queue: deque[np.ndarray] = deque()  # lockstep
        self.timing = RowTiming()

    def timings(self) -> RowTiming:
        return self.timed.timing if self.timed is not None else self.timing


class ChunkedExpertPolicy(RunsOnClock):
    """One expert per row, planning `chunk` actions at a time; rows run on the run's clock."""

    def __init__(self, chunk: int, experts: Any) -> None:
        self.chunk, self.experts = chunk, experts  # experts: task name -> the task's expert (shared, stateless)
        self.rows: list[_Row | None] = []
        self.clock: Clock | None = None

    def use_clock(self, clock: Clock) -> None:
        self.clock = clock if clock.real_time else None

    def row_timing(self, row: int) -> dict[str, Any] | None:
        state = self.rows[row]
        return state.timings().fields() if state is not None else None

    def noop_rows(self) -> list[int]:
        return noop_rows([None if row is None else row.timed for row in self.rows])

    def _row(self, task: TaskSpec, seed: int | None) -> _Row | None:
        return None if seed is None else _Row(self.experts(task.name), self.clock, seed, task.name)

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        self.rows = [self._row(task, seed) for seed in episode_seeds]

    def reset_slots(self, task: TaskSpec, seeds: dict[int, int | None]) -> None:
        for row, seed in seeds.items():
            self.rows[row] = self._row(task, seed)

    def select_action(self, batch: dict[str, Any]) -> np.ndarray:
        if STATE_KEY not in batch:
            raise UserError(
                f"policy=metaworld_expert needs '{STATE_KEY}' in the batch; keep it in the env's features_map"
            )
        states = np.asarray(batch[STATE_KEY], dtype=np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the experts' gains exceed the action range; the env clips
            return np.stack([self._act(row, state) for row, state in zip(self.rows, states, strict=True)])

    def _act(self, row: _Row | None, state: np.ndarray) -> np.ndarray:
        import time

        if row is None:
            return np.zeros(4, dtype=np.float32)
        if row.timed is not None:
            row.timed.arrive()
        if row.queue or (row.timed is not None and not row.timed.wants_chunk()):
            return row.queue.popleft() if row.timed is None else row.timed.pop()
        start = time.perf_counter()
        actions = plan(row.expert, state, self.chunk)
        wall_ms = 1000.0 * (time.perf_counter() - start)
        if row.timed is None:
            row.timing.add(0, None, wall_ms)
            row.queue.extend(actions)
            return row.queue.popleft()
        row.timed.request(actions, wall_ms)
        return row.timed.pop()

    def fork(self) -> ChunkedExpertPolicy:
        forked = ChunkedExpertPolicy(self.chunk, self.experts)
        forked.clock = self.clock
        return forked
