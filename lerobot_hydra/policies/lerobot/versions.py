"""The two LeRobot lines: 0.4.4 (Python 3.10-3.11) and 0.6.x (Python >= 3.12), and what each reads of the other.

A checkpoint's config.json is parsed by the installed LeRobot's config class for its `type`. LeRobot 0.6 writes
fields that 0.4 does not know; those that cannot change inference are dropped before parsing (a 0.6 ACT,
diffusion or SmolVLA then loads under 0.4.4). Any other unknown field, or a family 0.4 lacks, is one line naming
the LeRobot line to install. LeRobot 0.6 reads 0.4 checkpoints as they are (its new fields default to 0.4's
behaviour).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.policies.lerobot.checkpoint import CONFIG_FILE, Checkpoint, read_json

# 0.6-only fields that never change what a loaded policy computes: the Hub pin (policy.revision sets LeRobot's
# pretrained_revision) and training-only switches.
INERT_NEWER_FIELDS = {"pretrained_revision", "gradient_checkpointing", "tune_top_llm_layers", "tune_vlln"}
# 0.6's relative actions: inert while switched off.
RELATIVE_ACTION_FIELDS = {"use_relative_actions", "relative_exclude_joints", "action_feature_names"}


def lerobot_version() -> str:
    from importlib.metadata import version

    return version("lerobot")


def newer_lerobot() -> str:
    """How to get a LeRobot newer than the installed one."""
    if int(lerobot_version().split(".")[1]) < 6:
        return 'install LeRobot 0.6.x, which needs Python >= 3.12 (pip install -e ".[lerobot]" there)'
    return "upgrade lerobot (pip install -U lerobot)"


def inert_fields(config: dict[str, Any], unknown: set[str]) -> set[str]:
    """The fields of `unknown` (absent from this LeRobot) that can be dropped without changing the policy."""
    inert = unknown & INERT_NEWER_FIELDS
    if not config.get("use_relative_actions"):
        inert |= unknown & RELATIVE_ACTION_FIELDS
    return inert


def parse_policy_config(checkpoint: Checkpoint) -> Any:
    """The checkpoint's config.json as the installed LeRobot's config class for its policy type."""
    import lerobot.policies  # noqa: F401  registers every policy config class
    from lerobot.configs.policies import PreTrainedConfig

    raw = read_json(checkpoint.directory / CONFIG_FILE)
    kind = raw.get("type")
    known = sorted(PreTrainedConfig.get_known_choices())
    if kind not in known:
        raise UserError(
            f"config.json of '{checkpoint.name}' names the policy type '{kind}', which lerobot {lerobot_version()} "
            f"does not know (it knows {', '.join(known)}); if a newer LeRobot has it, {newer_lerobot()}"
        )
    fields = {f.name for f in dataclasses.fields(PreTrainedConfig.get_choice_class(kind))}
    unknown = set(raw) - fields - {"type"}
    blocking = unknown - inert_fields(raw, unknown)
    if blocking:
        raise UserError(
            f"config.json of '{checkpoint.name}' was saved by a newer LeRobot: lerobot {lerobot_version()} does not "
            f"know its fields {', '.join(sorted(blocking))}; {newer_lerobot()}"
        )
    try:
        if not unknown:
            return PreTrainedConfig.from_pretrained(checkpoint.directory)
        with tempfile.TemporaryDirectory() as directory:
            kept = {k: v for k, v in raw.items() if k not in unknown}
            (Path(directory) / CONFIG_FILE).write_text(json.dumps(kept))
            return PreTrainedConfig.from_pretrained(directory)
    except Exception as err:  # noqa: BLE001 - draccus raises many types; all mean the same to the user
        raise UserError(
            f"config.json of '{checkpoint.name}' does not parse with lerobot {lerobot_version()}: {first_line(err)}"
        ) from err


def first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
