"""Real-time chunking (RTC) in simulation: a row plans its next chunk while it still executes the current one.

On a robot, LeRobot's RTC engine (`lerobot.rollout.inference.rtc`) asks for a chunk in a background thread once
the action queue holds `queue_threshold` actions or fewer; while the policy computes, the robot executes the next
d actions (d: the latency in control steps), and the new chunk, guided to agree with the old chunk's leftover
(`predict_action_chunk(inference_delay=d, prev_chunk_left_over=..., execution_horizon=...)`), replaces the queue
from its d-th action on. Evaluation has no wall clock, so the latency is a setting (`inference_delay`, in steps)
and the row's own steps stand in for the thread: the chunk asked for at step t, from that step's observation,
replaces the row's queue at step t + d. Every row has its own queue, leftover and pending chunk, so an episode's
actions depend on its own seed and observations alone, as without RTC. An episode's first chunk, with no queue
to execute meanwhile, is used from its first action at once (on a robot the arm would wait d steps for it).
"""

from __future__ import annotations

import dataclasses
from collections import deque
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
    queue_threshold: int  # a row asks for the next chunk once its queue holds this many actions or fewer
    execution_horizon: int  # how many leftover actions the guidance sees (cut or zero-padded to it)


@dataclass
class PendingChunk:
    """A chunk asked for, not yet in the row's queue: it replaces the queue once `due` more steps have run."""

    chunk: Any  # (chunk_size, action_dim), the policy's actions before the postprocessor
    due: int


def configure(config: Any, settings: dict[str, Any]) -> tuple[Any, SimulatedLatency]:
    """The policy config with LeRobot's RTC guidance switched on as `policy.rtc` asks, and the row timing."""
    from lerobot.policies.rtc.configuration_rtc import RTCConfig

    if config.type not in RTC_FAMILIES:
        raise UserError(
            f"policy.rtc: the {config.type} policy has no real-time chunking (RTC exists for "
            f"{', '.join(sorted(RTC_FAMILIES))}); remove policy.rtc"
        )
    for key in settings:
        if key not in (*LATENCY_KEYS, *GUIDANCE_KEYS):
            valid = [*LATENCY_KEYS, *GUIDANCE_KEYS]
            raise UserError(
                f"policy.rtc.{key} is not an RTC setting{did_you_mean(key, valid)}; valid: {', '.join(valid)}"
            )
    if "inference_delay" not in settings:
        raise UserError(
            "policy.rtc needs inference_delay, the policy's latency in control steps: policy.rtc={inference_delay: 3}"
        )
    base = config.rtc_config if getattr(config, "rtc_config", None) is not None else RTCConfig()
    guidance = {key: settings[key] for key in GUIDANCE_KEYS if key in settings}
    if "prefix_attention_schedule" in guidance:
        guidance["prefix_attention_schedule"] = schedule(str(guidance["prefix_attention_schedule"]))
    try:
        rtc = dataclasses.replace(base, enabled=True, **guidance)
    except (ValueError, TypeError) as err:
        raise UserError(f"policy.rtc rejected by LeRobot's RTCConfig: {err}") from err
    latency = SimulatedLatency(
        integer(settings, "inference_delay", 0),
        integer(settings, "queue_threshold", 0, DEFAULT_QUEUE_THRESHOLD),
        integer({"execution_horizon": rtc.execution_horizon}, "execution_horizon", 1),
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


def integer(settings: dict[str, Any], key: str, least: int, default: int | None = None) -> int:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise UserError(f"policy.rtc.{key} must be an integer >= {least}, got {value!r}")
    return value


def check_timing(latency: SimulatedLatency, chunk_size: int) -> None:
    """The old queue must last through the latency, and a new chunk must outlast the threshold: else a row
    would run out of actions while it waits, or ask again before its chunk arrives."""
    d, threshold = latency.inference_delay, latency.queue_threshold
    if not d <= threshold < chunk_size - d:
        raise UserError(
            f"policy.rtc: with chunks of {chunk_size} actions and inference_delay={d}, queue_threshold must be in "
            f"[{d}, {chunk_size - d - 1}], got {threshold}; set policy.rtc.queue_threshold"
        )
    if latency.execution_horizon > chunk_size or latency.execution_horizon < d:
        raise UserError(
            f"policy.rtc.execution_horizon must be in [{d}, {chunk_size}] (the inference delay to the chunk size), "
            f"got {latency.execution_horizon}"
        )


def leftover(actions: deque[Any], horizon: int) -> Any:
    """A row's unexecuted actions, cut or zero-padded to `horizon` rows, as LeRobot's RTC engine hands them over."""
    import torch

    left = torch.stack(list(actions)[:horizon])
    if len(left) < horizon:
        left = torch.cat([left, left.new_zeros((horizon - len(left), *left.shape[1:]))])
    return left
