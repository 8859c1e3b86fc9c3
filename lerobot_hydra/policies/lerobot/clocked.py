"""Which LeRobot checkpoints run on a real-time `eval.clock` (docs/timing.md): the per-row families, whose rows
keep their own action queues (rows.py), when they queue chunks (not ACT's temporal ensembling, which asks every
step) and without `policy.rtc` (its own latency in steps)."""

from __future__ import annotations

from typing import Any

from lerobot_hydra.policies.lerobot.rows import PER_ROW_FAMILIES

_CHUNKED = "a chunked LeRobot family (" + ", ".join(sorted(PER_ROW_FAMILIES)) + ")"


def clock_refusal(config_json: dict[str, Any], overrides: dict[str, Any] | None, rtc: bool) -> str | None:
    """Why a checkpoint (its config.json, with `policy.overrides`) cannot run on a real-time clock; None: it can."""
    settings = {**config_json, **(overrides or {})}
    kind = settings.get("type")
    if kind not in PER_ROW_FAMILIES:
        return f"the {kind} policy runs its batch in lockstep; use eval.clock.mode=lockstep, or {_CHUNKED}"
    if settings.get("temporal_ensemble_coeff") is not None:
        return (
            "this ACT checkpoint ensembles a new chunk at every step (temporal_ensemble_coeff), so no chunk is ever "
            "in flight; use policy.overrides={temporal_ensemble_coeff: null} or eval.clock.mode=lockstep"
        )
    if rtc:
        return "policy.rtc models its own latency in control steps; drop policy.rtc (or use eval.clock.mode=lockstep)"
    return None
