"""The env types the installed LeRobot knows, their settable fields, and the one-line refusals of what cannot run.

LeRobot registers its env configs with draccus' ChoiceRegistry (`EnvConfig.register_subclass`); third-party
`lerobot_env_*` distributions register theirs when LeRobot's own `register_third_party_plugins()` imports them.
Values given as `env.<field>=...` are decoded by draccus against the type's dataclass, as `lerobot-eval --env.<field>`
decodes them.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from lerobot_hydra.core.errors import UserError, did_you_mean

# The adapter's own keys; every other key of the env node is a field of the LeRobot env type.
OWN_KEYS = ("type", "trust_remote_code", "compute_all_observations")
# Fields of a LeRobot env type that it computes from its other fields (not settings).
COMPUTED_FIELDS = {"features"}
# Fields of lerobot-eval's run, not of the env: the setting of ours that does the same.
RUN_FIELDS = {"max_parallel_tasks": "eval.max_parallel_tasks"}
# LeRobot 0.6 added `EnvConfig.create_envs` and `get_env_processors`, which the adapter builds envs through.
MIN_LEROBOT = (0, 6)
# Types that are no simulator at all.
REFUSED = {
    "gym_manipulator": "drives a real robot (LeRobot's HIL-SERL gym_manipulator), not a simulator",
}
# The simulator module each of LeRobot's own types imports and how to install it (plugins ship their own).
SIMULATORS: dict[str, tuple[str, str]] = {
    "aloha": ("gym_aloha", 'pip install "lerobot[aloha]" (gym-aloha)'),
    "pusht": ("gym_pusht", 'pip install "lerobot[pusht]" (gym-pusht)'),
    "libero": ("libero", 'pip install "lerobot[libero]" (hf-libero)'),
    "metaworld": ("metaworld", 'pip install "lerobot[metaworld]" (metaworld)'),
    "libero_plus": (
        "libero",
        "clone LIBERO-plus (github.com/sylvestf/LIBERO-plus), put it on PYTHONPATH and download its assets",
    ),
    "robocasa": (
        "robocasa",
        "pip install robocasa robosuite, then python -m robocasa.scripts.download_kitchen_assets",
    ),
    "vlabench": ("VLABench", "install VLABench from github.com/OpenMOSS/VLABench and download its assets"),
    "robotwin": ("envs", "install RoboTwin 2.0 (SAPIEN) from github.com/RoboTwin-Platform/RoboTwin"),
    "robomme": ("robomme", "pip install the robomme package from github.com/RoboMME/robomme_benchmark"),
    "isaaclab_arena": ("isaaclab", "install Isaac Sim and Isaac Lab Arena (NVIDIA), then env.trust_remote_code=true"),
}


def lerobot_version() -> tuple[int, int]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version("lerobot")
    except PackageNotFoundError as err:
        raise UserError('env=lerobot needs LeRobot; install it with pip install -e ".[lerobot]"') from err
    major, minor = (int(p) for p in text.split(".")[:2])
    if (major, minor) < MIN_LEROBOT:
        raise UserError(
            f"env=lerobot needs LeRobot 0.6 or newer (its EnvConfig.create_envs and env processors); lerobot "
            f"{text} is installed here: run it in the Python >= 3.12 environment with LeRobot 0.6"
        )
    return major, minor


@cache
def known_types() -> dict[str, type]:
    """Every registered env type, after LeRobot has imported the installed `lerobot_env_*` plugins."""
    lerobot_version()
    from lerobot.envs.configs import EnvConfig
    from lerobot.utils.import_utils import register_third_party_plugins

    register_third_party_plugins()
    return dict(EnvConfig.get_known_choices())


def type_class(name: str) -> type:
    types = known_types()
    if name in REFUSED:
        raise UserError(f"env.type={name} {REFUSED[name]}; env=lerobot evaluates simulated envs only")
    if name not in types:
        valid = sorted(set(types) - set(REFUSED))
        raise UserError(
            f"env.type={name} is not an env type of the installed LeRobot{did_you_mean(name, valid)}; known: "
            f"{', '.join(valid)} (a plugin registers more when its lerobot_env_* distribution is installed)"
        )
    return types[name]


def settable_fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name not in COMPUTED_FIELDS | set(RUN_FIELDS)]


def check_keys(name: str, keys: list[str]) -> None:
    """Each key is the adapter's own or a settable field of the type; one line listing the valid ones if not."""
    fields = settable_fields(type_class(name))
    for key in keys:
        if key in RUN_FIELDS:
            raise UserError(f"env.{key} is lerobot-eval's run setting, not the env's; set {RUN_FIELDS[key]} instead")
        if key not in fields and key not in OWN_KEYS:
            valid = sorted({*fields, *OWN_KEYS})
            raise UserError(
                f"unknown key 'env.{key}' for env.type={name}{did_you_mean(key, valid)}; valid keys: {', '.join(valid)}"
            )


def make_lerobot_config(name: str, settings: dict[str, Any]) -> Any:
    """The LeRobot EnvConfig of type `name` with `settings`, decoded (and checked by its __post_init__) as
    lerobot-eval decodes `--env.<field>` values; any error one line naming the setting."""
    import draccus

    cls = type_class(name)
    check_keys(name, list(settings))
    try:
        return draccus.decode(cls, dict(settings))
    except Exception as err:  # noqa: BLE001 - draccus' and the type's own checks, reported with the settings
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        field = next((key for key in settings if f"`{key}`" in text or f"'{key}'" in text), None)
        where = f"env.{field}={settings[field]}" if field else f"env.type={name} with {dict(settings)}"
        raise UserError(f"{where}: LeRobot rejects it: {text}") from err


def missing_simulator(name: str, err: ModuleNotFoundError) -> UserError:
    """A simulator module that is not installed, as one line naming what to install."""
    module = err.name or str(err)
    top = module.split(".")[0]
    known = SIMULATORS.get(name)
    if known is not None and known[0] == top:
        how = known[1]
    else:
        how = f"install the package that provides '{top}'"
    return UserError(f"env.type={name} needs the simulator module '{module}', which is not installed: {how}")
