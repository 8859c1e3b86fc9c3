"""A one-row family's chunk as one call computes it, and a step that only observes (one_row.py, serving/one_row.py).

A one-row family (one_row.py) is LeRobot's own `select_action` on a batch of one, which computes a chunk when its
action queue is empty and otherwise pops the queue. A chunk is that call with the queue empty: the action it
returns and those it queued, each postprocessed as the step that would pop it. A step between two chunks only
records its observation in the policy's history: `select_action` finds a placeholder queued and pops it.

That is exact for a family whose only state across an episode's chunks is its observation history, its action
queue and torch's global generators; a family keeping more is refused (`unservable`).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from lerobot_hydra.policies.lerobot.rows import ACTION, PerRowLeRobotPolicy
from lerobot_hydra.policies.lerobot.runtime import LeRobotPolicy

PLACEHOLDER = None  # the queued action an observing step pops (never postprocessed nor returned)


def unservable(config: Any) -> str | None:
    """Why a family's chunks depend on state besides its observations, queue and generators, if they do."""
    if config.type == "lingbot_va":
        return "it feeds each chunk's observed frames and executed actions into the next one through its KV cache"
    if config.type == "tdmpc" and getattr(config, "use_mpc", True):
        return "its planner warm-starts every chunk from the previous chunk's plan (_prev_mean)"
    if config.type == "molmoact2" and getattr(config, "per_episode_seed", False):
        return "with per_episode_seed it draws an episode's chunks from a generator of its own that it keeps"
    return None


def action_queue(policy: LeRobotPolicy) -> deque[Any] | None:
    """The action queue that `select_action` refills when it is empty (None: a family that acts afresh every
    step, its chunk one action)."""
    if isinstance(policy, PerRowLeRobotPolicy):
        return policy.slots[0].actions
    lerobot = policy.policy
    queue = getattr(lerobot, "_action_queue", None)
    return queue if queue is not None else (getattr(lerobot, "_queues", None) or {}).get(ACTION)


def chunk_now(policy: LeRobotPolicy, frame: dict[str, Any]) -> Any:
    """The chunk `select_action` computes from `frame` (a batch of one) with the queue empty, each action
    postprocessed: (chunk, action_dim). The queue is empty again after it."""
    import torch

    actions = [torch.as_tensor(policy.select_action(frame))]
    queue = action_queue(policy)
    while queue:
        action = queue.popleft()
        # As the step that would pop it: one step's action, (1, action_dim), postprocessed.
        batch = torch.stack([action]) if isinstance(policy, PerRowLeRobotPolicy) else action
        actions.append(torch.as_tensor(policy._postprocess(batch)))
    return torch.cat(actions).detach().to("cpu")


def observe_only(policy: LeRobotPolicy, frame: dict[str, Any]) -> None:
    """A step between two chunks: its observation recorded in the policy's history, nothing computed."""
    processed = policy.preprocessor(policy._policy_batch(frame))
    with policy._inference():
        if isinstance(policy, PerRowLeRobotPolicy):
            policy.slots[0].observe(policy._with_stacked_images(processed), 0)
            return
        queue = action_queue(policy)
        if queue is None:
            return  # a family that acts afresh from each observation keeps none
        queue.append(PLACEHOLDER)
        policy.policy.select_action(processed)
