"""Which LeRobot checkpoints run on which `eval.clock` (docs/timing.md), read from config.json before anything is
built: on a real-time clock every family that queues chunks, per row (rows.py) or one row at a time (one_row.py),
except those whose chunks depend on more than the row's observations (the ones a server refuses too) and the
families that run their batch in lockstep; real-time chunking (`join=rtc`) for the families that have it."""

from __future__ import annotations

from typing import Any

from lerobot_hydra.policies.lerobot.noise import ROW_NOISE_HOOKS
from lerobot_hydra.policies.lerobot.row_chunks import unservable
from lerobot_hydra.policies.lerobot.rows import PER_ROW_FAMILIES
from lerobot_hydra.policies.lerobot.rtc import ON_THE_CLOCK, RTC_FAMILIES, rtc_refusal
from lerobot_hydra.schemas.clock import ClockConfig


def clock_refusal(
    config_json: dict[str, Any], overrides: dict[str, Any] | None, rtc: dict[str, Any] | None, clock: ClockConfig
) -> str | None:
    """Why a checkpoint (its config.json, with `policy.overrides` and `policy.rtc`) cannot run on `clock`, in one
    sentence naming the setting and what to use; None: it can."""
    settings = {**config_json, **(overrides or {})}
    kind = str(settings.get("type"))
    rtc_saved = bool((settings.get("rtc_config") or {}).get("enabled"))
    if clock.join != "rtc" or not clock.real_time:
        if rtc is not None:
            return f"policy.rtc tunes real-time chunking, which runs on the clock: add {ON_THE_CLOCK}, or drop it"
        if rtc_saved:
            saved = f"the {kind} checkpoint enables real-time chunking (rtc_config)"
            off = "turn it off with policy.overrides={rtc_config: null}"
            if kind not in RTC_FAMILIES:
                return f"{saved}, which runs here for {', '.join(sorted(RTC_FAMILIES))} only; {off}"
            return f"{saved}; run it with {ON_THE_CLOCK}, or {off}"
    if not clock.real_time:
        return None
    mode = f"eval.clock.mode={clock.mode}"
    if kind not in PER_ROW_FAMILIES and kind in ROW_NOISE_HOOKS:
        return f"{mode}: the {kind} policy runs its batch in lockstep here; use eval.clock.mode=lockstep"
    if settings.get("temporal_ensemble_coeff") is not None:
        return (
            f"{mode}: this ACT checkpoint ensembles a new chunk at every step (temporal_ensemble_coeff), so no chunk "
            "is ever in flight; use policy.overrides={temporal_ensemble_coeff: null} or eval.clock.mode=lockstep"
        )
    if (why := unservable(_Config(settings))) is not None:
        return (
            f"{mode}: the {kind} policy's chunks depend on more than the row's observations ({why}); use "
            "eval.clock.mode=lockstep"
        )
    if clock.join == "rtc":
        why = rtc_refusal(kind, rtc, bool(settings.get("use_relative_actions")))
        return None if why is None else f"eval.clock.join=rtc: {why}"
    return None


class _Config:
    """config.json's settings read as attributes, as `unservable` reads a LeRobot config."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.__dict__.update(settings)
