"""Errors of building a simulator from the env settings, as one line naming the setting where it can.

Env constructors raise all kinds of exceptions for a setting they cannot use (robosuite's `ValueError: Current
sensor for observable nosuch_image is invalid` for `env.camera_names=[nosuch]`); each becomes a UserError that
names the `env.<setting>` whose value the message mentions, else the env and a pointer to the env.* settings.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from lerobot_hydra.core.errors import UserError

if TYPE_CHECKING:
    from lerobot_hydra.envs.base import EnvConfig, TaskEnv, TaskSpec

# Shorter values ('hd', 'v3') would be found in unrelated messages.
MIN_VALUE_CHARS = 3


def env_label(config: EnvConfig) -> str:
    """The env in messages: its Gymnasium id, else its kind (MetaWorld, Libero, ...)."""
    return config.display_name()


def build_env(config: EnvConfig, task: TaskSpec, render: bool) -> TaskEnv:
    """`config.build(task, render)`, any error of it one UserError line naming the setting."""
    try:
        return config.build(task, render=render)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - any constructor error is reported with the settings that caused it
        raise UserError(build_error(config, err)) from err


def build_error(config: EnvConfig, err: BaseException) -> str:
    text = str(err).strip()
    reason = text.splitlines()[0].rstrip(".") if text else type(err).__name__
    matching = [
        (len(s), f.name, getattr(config, f.name))
        for f in dataclasses.fields(config)
        for s in _strings(getattr(config, f.name))
        if len(s) >= MIN_VALUE_CHARS and s in reason
    ]
    if matching:
        _, name, value = max(matching, key=lambda item: item[0])
        return f"env.{name}={value}: building the {env_label(config)} env failed: {reason}"
    return f"building the {env_label(config)} env failed: {reason}; check the env.* settings"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str)]
    if isinstance(value, dict):
        return [str(v) for v in (*value.keys(), *value.values()) if isinstance(v, str)]
    return []
