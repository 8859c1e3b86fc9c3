"""Real-time chunking (RTC) in simulation: a row plans its next chunk while it still executes the current one.

On a robot, LeRobot's RTC engine (`lerobot.rollout.inference.rtc`) asks for a chunk in a background thread once
the action queue holds `queue_threshold` actions or fewer; while the policy computes, the robot executes the next
d actions (d: the latency in control steps), and the new chunk, guided to agree with the old chunk's leftover
(`predict_action_chunk(inference_delay=d, prev_chunk_left_over=..., execution_horizon=...)`), replaces the queue
from its d-th action on. Evaluation has no wall clock, so the latency is a setting (`inference_delay`, in steps)
and the row's own steps stand in for the thread: the chunk asked for at step t, from that step's observation,
replaces the row's queue at step t + d. Every row has its own queue, leftover and pending chunk, so an episode's
actions depend on its own seed and observations alone, as without RTC. As in LeRobot's engine the whole chunk is
queued (`n_action_steps` does not apply). An episode's first chunk, asked for with nothing to execute meanwhile,
is used from its first action: LeRobot's engine, whose arm waits idle for it, drops its first d actions as
stale, but here no time passes while the policy computes.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lerobot_hydra.core.errors import UserError, did_you_mean

# Per-row families whose flow-matching sampler takes LeRobot's RTC guidance (their `supports_rtc()`).
RTC_FAMILIES = frozenset({"smolvla", "pi0", "pi05"})
# LeRobot's RTCConfig fields that `policy.rtc` may set; the rest of it (debug tracking) is left as it is.
GUIDANCE_KEYS = ("execution_horizon", "max_guidance_weight", "prefix_attention_schedule")
LATENCY_KEYS = ("inference_delay", "queue_threshold")
DEFAULT_QUEUE_THRESHOLD = 30  # LeRobot's RTC engine's default (`--inference.queue_threshold`)


@dataclass(frozen=True)
class SimulatedLatency:
    """When a row asks for its next chunk and when that chunk takes over (see the module docstring)."""

    inference_delay: int  # control steps the policy takes to answer; its old queue runs meanwhile
    queue_threshold: int  # a row asks for the next chunk once its queue holds this many actions or fewer (>= 1)
    execution_horizon: int  # how many leftover actions the guidance sees (cut or zero-padded to it)


@dataclass
class PendingChunk:
    """A chunk asked for, not yet in the row's queue: it replaces the queue at the step where `due`,
    counted down once a step, reaches 0."""

    chunk: Any  # (chunk_size, action_dim), the policy's actions before the postprocessor
    due: int


def configure(config: Any, settings: Any) -> tuple[Any, SimulatedLatency]:
    """The policy config with LeRobot's RTC guidance switched on as `policy.rtc` asks, and the row timing."""
    from lerobot.policies.rtc.configuration_rtc import RTCConfig

    if config.type not in RTC_FAMILIES:
        raise UserError(
            f"policy.rtc: the {config.type} policy has no real-time chunking (RTC exists for "
            f"{', '.join(sorted(RTC_FAMILIES))}); remove policy.rtc"
        )
    if not isinstance(settings, Mapping):
        raise UserError(f"policy.rtc must be a mapping such as {{inference_delay: 3}}, got {settings!r}")
    valid = [*LATENCY_KEYS, *GUIDANCE_KEYS]
    for key in settings:
        if key not in valid:
            raise UserError(
                f"policy.rtc.{key} is not an RTC setting{did_you_mean(key, valid)}; valid: {', '.join(valid)}"
            )
    if "inference_delay" not in settings:
        raise UserError(
            "policy.rtc needs inference_delay, the policy's latency in control steps: policy.rtc={inference_delay: 3}"
        )
    if getattr(config, "use_relative_actions", False):
        # LeRobot's engine re-anchors the leftover and converts a whole chunk at once against the state of its
        # request; per-step postprocessing here would convert against each step's state instead.
        raise UserError(
            f"policy.rtc: this {config.type} checkpoint predicts relative actions (use_relative_actions), which "
            "real-time chunking here does not support; evaluate it without policy.rtc"
        )
    base = config.rtc_config if getattr(config, "rtc_config", None) is not None else RTCConfig()
    guidance = {key: settings[key] for key in GUIDANCE_KEYS if key in settings}
    if "prefix_attention_schedule" in guidance:
        guidance["prefix_attention_schedule"] = schedule(str(guidance["prefix_attention_schedule"]))
    if "max_guidance_weight" in guidance:
        weight = guidance["max_guidance_weight"]
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
            raise UserError(f"policy.rtc.max_guidance_weight must be a number > 0, got {weight!r}")
    rtc = dataclasses.replace(base, enabled=True, **guidance)
    delay = integer("inference_delay", settings["inference_delay"], 0)
    latency = SimulatedLatency(
        delay,
        # At least the delay: the old queue must last until the new chunk takes over.
        integer("queue_threshold", settings.get("queue_threshold", DEFAULT_QUEUE_THRESHOLD), max(delay, 1)),
        integer("execution_horizon", rtc.execution_horizon, 1),
    )
    check_timing(latency, int(config.chunk_size))
    return dataclasses.replace(config, rtc_config=rtc), latency


def schedule(name: str) -> Any:
    from lerobot.configs.types import RTCAttentionSchedule

    names = [s.name for s in RTCAttentionSchedule]
    if name.upper() not in names:
        raise UserError(
            f"policy.rtc.prefix_attention_schedule: '{name}' is not a schedule{did_you_mean(name.upper(), names)}; "
            f"valid: {', '.join(names)}"
        )
    return RTCAttentionSchedule[name.upper()]


def integer(key: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise UserError(f"policy.rtc.{key} must be an integer >= {least}, got {value!r}")
    return value


def check_timing(latency: SimulatedLatency, chunk_size: int) -> None:
    """A row asks with `queue_threshold` actions left or, when a new chunk is no longer than the threshold, as that
    chunk takes over, with `chunk_size - inference_delay` left: that must last the delay too."""
    d = latency.inference_delay
    if 2 * d > chunk_size:
        raise UserError(
            f"policy.rtc.inference_delay={d} is more than half the chunk ({chunk_size} actions): a row would run out "
            "of actions before its next chunk arrives; lower it"
        )
    horizon = latency.execution_horizon
    if horizon > chunk_size:
        raise UserError(f"policy.rtc.execution_horizon must be at most the chunk size ({chunk_size}), not {horizon}")


def leftover(actions: deque[Any], horizon: int) -> Any:
    """A row's unexecuted actions, cut or zero-padded to `horizon` rows, as LeRobot's RTC engine hands them over."""
    import torch

    left = torch.stack(list(actions)[:horizon])
    if len(left) < horizon:
        left = torch.cat([left, left.new_zeros((horizon - len(left), *left.shape[1:]))])
    return left
