"""A LeRobot policy whose per-episode state is per batch row, so a finished sub-env starts its next episode at once.

LeRobot's `select_action` keeps one action queue for the whole batch (and one observation history for Diffusion
and VQ-BeT, one temporal ensembler for ACT), so the rows of a batch must start and step together. Here every row
has its own queue, history, ensembler and noise generator, and the chunks come from the policy's own
`predict_action_chunk`: at each step, the rows whose queue is empty (every row, for ACT with temporal
ensembling) are stacked into one forward pass, each with its own history (set as the policy's `_queues` for
the call, as `predict_action_chunk` reads it) and per-row noise for exactly those rows. Each of them keeps
its own position in that pass, the others' positions filled with copies of one of them: float kernels may
round differently for another batch size or position (measured on CPU, ~1e-7), so a row's actions never depend
on which batch-mates needed a chunk at the same step, and are bit for bit those of lockstep. A row gets what
LeRobot's `select_action` gives it: its history holds its last `n_obs_steps` observations, the first one
repeated at its episode's start (`populate_queues`); a chunk is cut to the length of LeRobot's action queue
(`n_action_steps`; VQ-BeT's `action_chunk_size`); and the postprocessor runs on each step's actions, as in
lerobot-eval. On a real-time `eval.clock` each row's queue is a `clock.TimedRow` (LeRobot's async-inference
rules; with `join=rtc` its chunks are guided towards its leftover, rtc.py, one pass per assumed delay); in lockstep
each chunk's wall time is recorded with the row's episode.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.policies.base import DeclaresReads, RunsOnClock
from lerobot_hydra.policies.clock import Clock, RowTiming, TimedRow, noop_rows
from lerobot_hydra.policies.lerobot.noise import RowNoise
from lerobot_hydra.policies.lerobot.rtc import leftover
from lerobot_hydra.policies.lerobot.runtime import LeRobotPolicy, rows_of

# Families whose `select_action` is a queue over `predict_action_chunk` (checked against their LeRobot source);
# any other family keeps LeRobot's batch-wide `select_action` and runs its batches in lockstep.
PER_ROW_FAMILIES = frozenset({"act", "diffusion", "vqbet", "smolvla", "pi0", "pi05", "pi0_fast"})
ACTION = "action"
OBS_IMAGES = "observation.images"


@dataclass
class QueueLayout:
    """What LeRobot's `select_action` keeps per episode, read from the policy's queues after its `reset()`."""

    history: dict[str, int]  # policy key -> how many past observations of it `predict_action_chunk` stacks
    actions: int | None  # how many actions of a chunk are queued; None: every step asks for a chunk
    ensembler: Any = None  # ACT's temporal ensembler, reset (a template for each row's own)

    @classmethod
    def of(cls, policy: Any) -> QueueLayout:
        queues = getattr(policy, "_queues", None) or {}
        history = {key: queue.maxlen for key, queue in queues.items() if key != ACTION}
        if getattr(policy.config, "temporal_ensemble_coeff", None) is not None:
            return cls(history, None, policy.temporal_ensembler)
        # ACT, pi0, pi0.5 and pi0-FAST queue actions in `_action_queue`; Diffusion, VQ-BeT and SmolVLA in `_queues`.
        queue = getattr(policy, "_action_queue", None)
        queue = queue if queue is not None else queues[ACTION]
        return cls(history, queue.maxlen)


@dataclass
class RowState:
    """The running episode of one batch row: its noise, observation history and queued actions."""

    noise: RowNoise
    history: dict[str, deque[Any]]  # policy key -> this row's last observations, each of batch size 1
    actions: deque[Any] = field(default_factory=deque)  # this row's queued actions, each (action_dim,)
    ensembler: Any = None
    idle: bool = False  # no episode on this row: it asks for nothing and its action is never applied
    timed: TimedRow | None = None  # a real-time eval.clock: the row's queue, in place of `actions`
    timing: RowTiming = field(default_factory=RowTiming)  # lockstep: its chunks' wall times

    def observe(self, observations: dict[str, Any], row: int) -> None:
        for key, history in self.history.items():
            if key not in observations:
                continue  # as LeRobot's populate_queues: a queue the batch has no key for stays empty
            value = observations[key][row : row + 1]
            # As LeRobot's populate_queues: an episode's first observation fills the whole history.
            history.extend([value] * (history.maxlen or 1) if not history else [value])

    def needs_chunk(self) -> bool:
        return not self.idle and (self.ensembler is not None or not self.actions)

    def take(self, chunk: Any, length: int | None) -> None:
        """Queue this row's share of a chunk (its row of `chunk`, shape (1, chunk_size, action_dim))."""
        if self.ensembler is not None:
            self.actions.append(self.ensembler.update(chunk)[0])
        else:
            self.actions.extend(chunk[0, :length])


def rows_taken(value: Any, rows: list[int], size: int) -> Any:
    """`value`'s entries for `rows` when it has one per batch row (tensors and lists of `size`); else as is."""
    if isinstance(value, str) or not hasattr(value, "__len__") or len(value) != size or rows == list(range(size)):
        return value
    if hasattr(value, "index_select"):
        import torch

        return value.index_select(0, torch.tensor(rows, device=value.device))
    return [value[row] for row in rows]


class PerRowLeRobotPolicy(LeRobotPolicy, RunsOnClock, DeclaresReads):
    """`reset_slots` starts an episode on some rows while the others continue (see the module docstring)."""

    def __init__(self, *args: Any, guidance: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guidance = guidance  # LeRobot's RTCConfig that eval.clock.join=rtc switches on (rtc.py); None: no RTC
        self.guided = False  # real-time chunking is on
        self.slots: list[RowState] = []
        self.layout: QueueLayout | None = None
        self.filler = RowNoise()  # the noise of the rows that pad a forward pass (their chunks are dropped)
        self.clock: Clock | None = None

    def use_clock(self, clock: Clock) -> None:
        self.clock = clock if clock.real_time else None
        if self.clock is not None and clock.config.join == "rtc":
            assert self.guidance is not None, "eval.clock.join=rtc is refused for families without RTC"
            self.policy.config.rtc_config = self.guidance
            self.policy.init_rtc_processor()
            self.guided = True

    def row_timing(self, row: int) -> dict[str, Any] | None:
        slot = self.slots[row]
        return (slot.timed.timing if slot.timed is not None else slot.timing).fields()

    def noop_rows(self) -> list[int]:
        return noop_rows([slot.timed for slot in self.slots])

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        self._reset_policy()
        self.layout = QueueLayout.of(self.policy)
        self.slots = [self._row(seed, task) for seed in episode_seeds]

    def reset_slots(self, task: TaskSpec, seeds: dict[int, int | None]) -> None:
        """The rows' new episodes (their task's text comes with every batch, per row); None: the row idles and
        asks for no chunk."""
        for row, seed in seeds.items():
            self.slots[row] = self._row(seed, task)

    def _row(self, seed: int | None, task: TaskSpec) -> RowState:
        assert self.layout is not None
        noise = RowNoise()
        noise.start(seed)
        history = {key: deque(maxlen=length) for key, length in self.layout.history.items()}
        ensembler = None
        if self.layout.ensembler is not None:
            ensembler = copy.deepcopy(self.layout.ensembler)
            ensembler.reset()
        timed = TimedRow(self.clock, seed, task.name) if self.clock is not None and seed is not None else None
        return RowState(noise, history, ensembler=ensembler, idle=seed is None, timed=timed)

    def select_action(self, batch: dict[str, Any]) -> Any:
        import torch

        inputs = self._policy_batch(batch)
        size = rows_of(inputs)
        if size != len(self.slots):
            raise ValueError(f"select_action got a batch of {size} rows after a reset of {len(self.slots)}")
        processed = self.preprocessor(inputs)
        with self._inference():
            observations = self._with_stacked_images(processed)
            for row, slot in enumerate(self.slots):
                slot.observe(observations, row)
            if self.clock is not None:
                actions = self._timed_actions(observations, size)
            else:
                needing = [row for row, slot in enumerate(self.slots) if slot.needs_chunk()]
                if needing:
                    start = time.perf_counter()
                    chunks = self._chunks(observations, needing, size)
                    wall_ms = 1000.0 * (time.perf_counter() - start)
                    assert self.layout is not None
                    for row in needing:
                        self.slots[row].take(chunks[row : row + 1], self.layout.actions)
                        self.slots[row].timing.add(0, None, wall_ms)
                actions = [None if slot.idle else slot.actions.popleft() for slot in self.slots]
            template = next(a for a in actions if a is not None)
            action = torch.stack([torch.zeros_like(template) if a is None else a for a in actions])
        return self._postprocess(action)

    def reads_next(self) -> list[bool]:
        """A row reads the coming step's observation when it will ask for a chunk within its history's length
        (the chunk stacks its last `n_obs_steps` observations): its queue holds fewer actions than that. With
        temporal ensembling or on a real-time clock, every step."""
        assert self.layout is not None
        if self.clock is not None:
            return [not slot.idle for slot in self.slots]
        depth = max((length or 1 for length in self.layout.history.values()), default=1)
        return [not slot.idle and (slot.ensembler is not None or len(slot.actions) < depth) for slot in self.slots]

    def _with_stacked_images(self, processed: dict[str, Any]) -> dict[str, Any]:
        """Diffusion and VQ-BeT keep their cameras stacked under one key, stacked before their history."""
        import torch

        if OBS_IMAGES not in (self.layout.history if self.layout else {}):
            return processed
        cameras = [processed[key] for key in self.policy.config.image_features]
        return {**processed, OBS_IMAGES: torch.stack(cameras, dim=-4)}

    def _timed_actions(self, observations: dict[str, Any], size: int) -> list[Any]:
        """A real-time clock: due chunks join their rows' queues, the rows that ask get one forward pass per
        guidance (unguided, and with `join=rtc` one per assumed delay), each row charged its pass's latency, and
        each row pops its action (policies/clock.py)."""
        timed = [slot.timed for slot in self.slots]
        for row in timed:
            if row is not None:
                row.arrive()
        passes: dict[int | None, dict[int, list[Any]]] = {}  # assumed delay (None: unguided) -> row -> leftover
        for i, row in enumerate(timed):
            if row is not None and row.wants_chunk():
                delay, left = row.guidance() or (None, [])
                passes.setdefault(delay, {})[i] = left
        assert self.layout is not None
        length = None if self.guided else self.layout.actions  # as LeRobot's RTC engine, RTC queues whole chunks
        for delay, asking in passes.items():
            rows = list(asking)
            guidance = None if delay is None else self._guidance(delay, asking, size)
            start = time.perf_counter()
            chunks = self._chunks(observations, rows, size, guidance)
            wall_ms = 1000.0 * (time.perf_counter() - start)
            for i in rows:
                cast(TimedRow, timed[i]).request(list(chunks[i, :length]), wall_ms)
        return [None if row is None else row.pop() for row in timed]

    def _guidance(self, delay: int, lefts: dict[int, list[Any]], size: int) -> dict[str, Any]:
        """LeRobot's RTC arguments for a pass of the rows in `lefts`, each guided towards its own leftover."""
        import torch

        horizon = int(self.guidance.execution_horizon)
        first = next(iter(lefts))
        padded = [row if row in lefts else first for row in range(size)]
        return {
            "inference_delay": delay,
            "prev_chunk_left_over": torch.stack([leftover(lefts[row], horizon) for row in padded]),
            "execution_horizon": horizon,
        }

    def _grad_mode(self) -> contextlib.AbstractContextManager[Any]:
        """RTC's guidance takes a gradient inside the sampler, which inference mode forbids."""
        import torch

        return torch.no_grad() if self.guided else super()._grad_mode()

    def fork(self) -> PerRowLeRobotPolicy:
        forked = super().fork()
        forked.guidance, forked.guided, forked.clock = self.guidance, self.guided, self.clock
        return forked

    def _chunks(
        self, observations: dict[str, Any], rows: list[int], size: int, guidance: dict[str, Any] | None = None
    ) -> Any:
        """One forward pass for `rows`, each at its own position with its own history and noise, the other
        positions filled (see the module docstring): (size, chunk_size, action_dim)."""
        import torch

        assert self.layout is not None
        padded = [row if row in rows else rows[0] for row in range(size)]
        batch = {key: rows_taken(value, padded, size) for key, value in observations.items() if key != ACTION}
        if hasattr(self.policy, "_queues"):
            queues: dict[str, deque[Any]] = {ACTION: deque(maxlen=self.layout.actions)}
            for key, length in self.layout.history.items():
                if key not in batch:
                    continue
                stacked = (torch.cat([self.slots[row].history[key][i] for row in padded]) for i in range(length))
                queues[key] = deque(stacked, maxlen=length)
            self.policy._queues = queues

        def infer() -> Any:
            return self.policy.predict_action_chunk(batch, **(guidance or {}))

        if self.noise is None:
            return infer()
        self.filler.start(None)
        noise = [self.slots[row].noise if row in rows else self.filler for row in range(size)]
        return self._with_row_noise(noise, infer)
