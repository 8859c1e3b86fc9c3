"""The server side of a one-row family (policies/lerobot/one_row.py): each row's chunk computed alone, as in-process.

For each request row, the served policy is reset (its queues and processors, as at an episode's start) and torch's
global generators are set to the state the row carries (seeded with `row_seed` of its episode seed at its
episode's first chunk). The frames of its history before the last are observed as in-process steps between two
chunks observe theirs, and the last one computes the chunk (row_chunks.py); the generators' state after it goes
back with the chunk.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.policies.lerobot.noise import GlobalRngState, row_seed
from lerobot_hydra.policies.lerobot.row_chunks import action_queue, chunk_now, observe_only, unservable
from lerobot_hydra.policies.lerobot.rows import ACTION, PerRowLeRobotPolicy
from lerobot_hydra.policies.lerobot.runtime import LeRobotPolicy

# A reset's episode seed only seeds per-row noise hooks, which a one-row family has none of; any seed but None
# (an idle row, which computes nothing) will do.
ANY_SEED = 0


class OneRowChunks:
    """A one-row family's chunks for request rows, one row at a time (see the module docstring)."""

    def __init__(self, policy: LeRobotPolicy) -> None:
        config = policy.policy.config
        why = unservable(config)
        if why is not None:
            raise UserError(
                f"the {config.type} policy cannot be served: {why}, state that a request does not carry; "
                "evaluate it in-process instead"
            )
        self.policy = policy
        policy.reset(None, [ANY_SEED])  # type: ignore[arg-type]  # its queues, read below
        queues = getattr(policy.policy, "_queues", None) or {}
        self.history = max((q.maxlen or 1 for key, q in queues.items() if key != ACTION), default=1)
        if isinstance(policy, PerRowLeRobotPolicy):
            assert policy.layout is not None
            self.queue_length = policy.layout.actions or 1
        else:
            queue = action_queue(policy)
            self.queue_length = 1 if queue is None else queue.maxlen or 1
        self.noise_state_bytes = len(GlobalRngState(policy.device).capture().to_bytes())

    def infer(
        self, frames: dict[str, np.ndarray], tasks: list[str], seeds: list[int | None], noise: list[bytes | None]
    ) -> tuple[np.ndarray, list[bytes]]:
        """Each row's chunk, (rows, chunk, action_dim), and the global generators' state after it."""
        chunks, states = [], []
        for r, (task, seed, state) in enumerate(zip(tasks, seeds, noise, strict=True)):
            history = [
                {key: np.array(value[r : r + 1, i]) for key, value in frames.items()} for i in range(self.history)
            ]
            for frame in history:
                frame["task"] = [task]
            rng = GlobalRngState(self.policy.device)
            with self.policy.lock:
                self.policy.reset(None, [ANY_SEED])  # type: ignore[arg-type]  # as in-process, before the seeding
                if state is None:
                    rng.seed(row_seed(seed))
                else:
                    rng.load(state)
                with rng.active():
                    chunks.append(self._chunk(history))
            states.append(rng.to_bytes())
        return np.stack(chunks), states

    def _chunk(self, history: list[dict[str, Any]]) -> np.ndarray:
        for frame in history[:-1]:
            observe_only(self.policy, frame)
        return np.asarray(chunk_now(self.policy, history[-1]).numpy())
