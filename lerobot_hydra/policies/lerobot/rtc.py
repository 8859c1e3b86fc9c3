"""Real-time chunking (RTC), LeRobot's guidance of a new chunk towards the actions its row has not executed yet.

RTC is one way for a chunk to join a row's queue on a real-time `eval.clock` (`join=rtc`, policies/clock.py): the
clock decides when a row asks, which delay the guidance assumes and when the chunk arrives; here is what the
policy needs for it: LeRobot's `RTCConfig`, switched on, with the guidance settings `policy.rtc` gives
(`execution_horizon`, `max_guidance_weight`, `prefix_attention_schedule`), and the leftover cut or zero-padded to
the execution horizon, as LeRobot's RTC engine hands it to `predict_action_chunk`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from lerobot_hydra.core.errors import UserError, did_you_mean

# Per-row families whose flow-matching sampler takes LeRobot's RTC guidance (their `supports_rtc()`).
RTC_FAMILIES = frozenset({"smolvla", "pi0", "pi05"})
# LeRobot's RTCConfig fields that `policy.rtc` may set; the rest of it (debug tracking) is left as it is.
GUIDANCE_KEYS = ("execution_horizon", "max_guidance_weight", "prefix_attention_schedule")
# The settings of the steps-based RTC of earlier versions, now the clock's.
MOVED_TO_CLOCK = ("inference_delay", "queue_threshold")
ON_THE_CLOCK = "eval.clock.mode=modeled eval.clock.latency_ms=<ms> eval.clock.join=rtc"


def rtc_refusal(kind: str, settings: Any, relative_actions: bool) -> str | None:
    """Why `eval.clock.join=rtc` (with `policy.rtc`'s `settings`) cannot run a checkpoint of family `kind`."""
    if kind not in RTC_FAMILIES:
        return (
            f"the {kind} policy has no real-time chunking (RTC exists for {', '.join(sorted(RTC_FAMILIES))}); "
            "use eval.clock.join=aggregate"
        )
    if relative_actions:
        # LeRobot's engine re-anchors the leftover against the state of each request; the leftover here is the
        # queue as the policy predicted it.
        return (
            f"this {kind} checkpoint predicts relative actions (use_relative_actions), which real-time chunking here "
            "does not support; use eval.clock.join=aggregate"
        )
    return None


def guidance_config(config: Any, settings: Any) -> Any:
    """LeRobot's RTCConfig for `config`'s checkpoint, switched on, with `policy.rtc`'s guidance settings."""
    from lerobot.policies.rtc.configuration_rtc import RTCConfig

    settings = {} if settings is None else settings
    if not isinstance(settings, Mapping):
        raise UserError(f"policy.rtc must be a mapping such as {{execution_horizon: 10}}, got {settings!r}")
    for key in settings:
        if key in MOVED_TO_CLOCK:
            raise UserError(
                f"policy.rtc.{key} is the clock's now: real-time chunking runs on eval.clock ({ON_THE_CLOCK}, "
                "eval.clock.chunk_size_threshold for when a row asks); remove it from policy.rtc"
            )
        if key not in GUIDANCE_KEYS:
            raise UserError(
                f"policy.rtc.{key} is not an RTC guidance setting{did_you_mean(key, list(GUIDANCE_KEYS))}; valid: "
                f"{', '.join(GUIDANCE_KEYS)}"
            )
    base = config.rtc_config if getattr(config, "rtc_config", None) is not None else RTCConfig()
    guidance = dict(settings)
    if "prefix_attention_schedule" in guidance:
        guidance["prefix_attention_schedule"] = schedule(str(guidance["prefix_attention_schedule"]))
    if "max_guidance_weight" in guidance:
        weight = guidance["max_guidance_weight"]
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
            raise UserError(f"policy.rtc.max_guidance_weight must be a number > 0, got {weight!r}")
    chunk = int(config.chunk_size)
    if "execution_horizon" not in guidance:  # LeRobot's default (10) cut to a shorter chunk
        guidance["execution_horizon"] = min(int(base.execution_horizon), chunk)
    rtc = dataclasses.replace(base, enabled=True, **guidance)
    horizon = rtc.execution_horizon
    if isinstance(horizon, bool) or not isinstance(horizon, int) or not 1 <= horizon <= chunk:
        raise UserError(
            f"policy.rtc.execution_horizon must be an integer from 1 to the chunk size {chunk}, not {horizon!r}"
        )
    return rtc


def schedule(name: str) -> Any:
    from lerobot.configs.types import RTCAttentionSchedule

    names = [s.name for s in RTCAttentionSchedule]
    if name.upper() not in names:
        raise UserError(
            f"policy.rtc.prefix_attention_schedule: '{name}' is not a schedule{did_you_mean(name.upper(), names)}; "
            f"valid: {', '.join(names)}"
        )
    return RTCAttentionSchedule[name.upper()]


def leftover(actions: Sequence[Any], horizon: int) -> Any:
    """A row's unexecuted actions, cut or zero-padded to `horizon` rows, as LeRobot's RTC engine hands them over."""
    import torch

    left = torch.stack(list(actions)[:horizon])
    if len(left) < horizon:
        left = torch.cat([left, left.new_zeros((horizon - len(left), *left.shape[1:]))])
    return left
