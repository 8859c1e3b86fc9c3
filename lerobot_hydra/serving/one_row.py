"""The server side of a one-row family (policies/lerobot/one_row.py): each row's chunk computed alone, as in-process.

In-process, every row of such a family is a policy of its own, run as a batch of one with torch's global
generators swapped to its episode's state, and it computes a chunk at the step its action queue runs empty. Here,
for each request row, the served policy is reset (its queues and processors, as at an episode's start) and the
global generators are set to the state the row carries (seeded with `row_seed` of its episode seed at its
episode's first chunk). The frames of its history before the last are observed as in-process steps between two
chunks observe theirs: `select_action` finds an action queued (a placeholder here) and only records the
observation. The last frame then runs the policy's own `select_action` with its queue empty, so it computes the
chunk as that in-process step does; the chunk is the action it returns and those it queued, each postprocessed as
in-process, and the generators' state after it goes back with the chunk.

That is exact for a family whose only state across an episode's chunks is its observation history, its action
queue and the global generators; a family keeping more is refused (`unservable`).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.policies.lerobot.noise import GlobalRngState, row_seed
from lerobot_hydra.policies.lerobot.rows import ACTION, PerRowLeRobotPolicy
from lerobot_hydra.policies.lerobot.runtime import LeRobotPolicy

PLACEHOLDER = None  # the queued action an observing step pops (never postprocessed nor returned)
# A reset's episode seed only seeds per-row noise hooks, which a one-row family has none of; any seed but None
# (an idle row, which computes nothing) will do.
ANY_SEED = 0


def unservable(config: Any) -> str | None:
    """Why a family's chunks depend on state a request does not carry, if they do."""
    if config.type == "lingbot_va":
        return "it feeds each chunk's observed frames and executed actions into the next one through its KV cache"
    if config.type == "tdmpc" and getattr(config, "use_mpc", True):
        return "its planner warm-starts every chunk from the previous chunk's plan (_prev_mean)"
    if config.type == "molmoact2" and getattr(config, "per_episode_seed", False):
        return "with per_episode_seed it draws an episode's chunks from a generator of its own that it keeps"
    return None


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
            queue = self._queue()
            self.queue_length = 1 if queue is None else queue.maxlen or 1
        self.noise_state_bytes = len(GlobalRngState(policy.device).capture().to_bytes())

    def _queue(self) -> deque[Any] | None:
        """The action queue that `select_action` refills when it is empty (None: a family that acts afresh every
        step, its chunk one action)."""
        if isinstance(self.policy, PerRowLeRobotPolicy):
            return self.policy.slots[0].actions
        lerobot = self.policy.policy
        queue = getattr(lerobot, "_action_queue", None)
        return queue if queue is not None else (getattr(lerobot, "_queues", None) or {}).get(ACTION)

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
        import torch

        policy = self.policy
        for frame in history[:-1]:
            self._observe(frame)
        actions = [torch.as_tensor(policy.select_action(history[-1]))]
        queue = self._queue()
        while queue:
            action = queue.popleft()
            # As in-process, where a later step pops it: one step's action, (1, action_dim), postprocessed.
            batch = torch.stack([action]) if isinstance(policy, PerRowLeRobotPolicy) else action
            actions.append(torch.as_tensor(policy._postprocess(batch)))
        return torch.cat(actions).detach().to("cpu").numpy()

    def _observe(self, frame: dict[str, Any]) -> None:
        """An in-process step between two chunks: its observation recorded, a queued action popped."""
        policy = self.policy
        processed = policy.preprocessor(policy._policy_batch(frame))
        with policy._inference():
            if isinstance(policy, PerRowLeRobotPolicy):
                policy.slots[0].observe(policy._with_stacked_images(processed), 0)
                return
            queue = self._queue()
            assert queue is not None, "a family with an observation history queues its actions"
            queue.append(PLACEHOLDER)
            policy.policy.select_action(processed)
