"""What an env gives (after its `pre` processors) against what a LeRobot policy reads, checked before any rollout.

A mismatch is one line naming the missing or misshapen keys and the rename map that would fix it. Env keys the
policy does not read are dropped.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.processors.observation import RAW_KEY

if TYPE_CHECKING:
    from lerobot_hydra.envs.base import EnvConfig

log = logging.getLogger("lerobot_hydra")

Shape = tuple[int, ...]
OBSERVATION_PREFIX = "observation."
# Cameras a policy adds itself (`empty_cameras` of pi0, pi0.5 and SmolVLA) and fills with blank images.
SELF_FILLED_CAMERA = re.compile(r"^observation\.images\.empty_camera_\d+$")


def batched_zeros(space: Any) -> Any:
    """A batch of one all-zero observation shaped like `space` (nested dicts for Dict spaces)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return {key: batched_zeros(sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Box):
        return np.zeros((1, *space.shape), dtype=space.dtype)
    if isinstance(space, spaces.Discrete):
        return np.zeros((1,), dtype=np.int64)
    return np.asarray(space.sample())[None]


def env_observation_features(env: EnvConfig) -> dict[str, Shape]:
    """Observation keys and per-sample shapes the env's `pre` processors produce, without a simulator."""
    task = env.tasks()[0]
    observation_space, _ = env.spaces(task)
    pre, _ = env.build_processors()
    batch = pre({RAW_KEY: batched_zeros(observation_space), "task": [task.description]})
    return {
        key: tuple(int(d) for d in value.shape[1:])
        for key, value in batch.items()
        if key.startswith(OBSERVATION_PREFIX) and hasattr(value, "shape")
    }


def _shape_text(shape: Shape) -> str:
    return "(" + ", ".join(map(str, shape)) + (",)" if len(shape) == 1 else ")")


def _fits(kind: str, expected: Shape, got: Shape, resizes_images: bool) -> bool:
    if kind == "VISUAL":
        return len(got) == 3 and got[0] == expected[0] and (resizes_images or got == expected)
    return got == expected


def match_features(
    policy_name: str,
    policy_inputs: Mapping[str, Any],
    env_features: dict[str, Shape],
    rename_map: dict[str, str],
    blank_cameras: list[str],
    resizes_images: bool,
    pads_missing_cameras: bool = False,
) -> dict[str, str]:
    """{env key: policy key} for every observation the policy reads; raises one UserError on a mismatch.

    `policy_inputs` maps policy keys to LeRobot `PolicyFeature`s (`.type.value`, `.shape`).
    `pads_missing_cameras`: the policy can take blank images for cameras left out (pi0, pi0.5, SmolVLA).
    """
    kinds = {key: str(getattr(ft.type, "value", ft.type)) for key, ft in policy_inputs.items()}
    shapes = {key: tuple(int(d) for d in ft.shape) for key, ft in policy_inputs.items()}
    cameras = [key for key, kind in kinds.items() if kind == "VISUAL"]
    for key in blank_cameras:
        if key not in cameras:
            raise UserError(
                f"policy.blank_cameras names '{key}', which is not a camera of '{policy_name}' "
                f"(its cameras: {', '.join(cameras) or 'none'})"
            )
    source_of = {rename_map.get(key, key): key for key in env_features}
    keep: dict[str, str] = {}
    missing: list[str] = []
    misshapen: list[str] = []
    for key in policy_inputs:
        source = source_of.get(key)
        if source is None:
            if key not in blank_cameras and not SELF_FILLED_CAMERA.match(key):
                missing.append(key)
            continue
        if not _fits(kinds[key], shapes[key], env_features[source], resizes_images):
            misshapen.append(key)
            continue
        keep[source] = key
    if missing or misshapen:
        raise UserError(
            _mismatch_message(
                policy_name,
                kinds,
                shapes,
                env_features,
                rename_map,
                keep,
                missing,
                misshapen,
                resizes_images,
                pads_missing_cameras,
            )
        )
    dropped = sorted(set(env_features) - set(keep))
    if dropped:
        log.info("env features that %s does not read are dropped: %s", policy_name, ", ".join(dropped))
    return keep


def _mismatch_message(
    policy_name: str,
    kinds: dict[str, str],
    shapes: dict[str, Shape],
    env_features: dict[str, Shape],
    rename_map: dict[str, str],
    keep: dict[str, str],
    missing: list[str],
    misshapen: list[str],
    resizes_images: bool,
    pads_missing_cameras: bool,
) -> str:
    parts = []
    if missing:
        wanted = ", ".join(f"{key} {_shape_text(shapes[key])}" for key in missing)
        parts.append(f"policy '{policy_name}' reads {wanted}, which the env does not provide")
    source_of = {rename_map.get(key, key): key for key in env_features}
    for key in misshapen:
        source = source_of[key]
        via = "" if source == key else f" (from {source})"
        parts.append(
            f"'{policy_name}' reads {key} as {_shape_text(shapes[key])} but the env gives "
            f"{_shape_text(env_features[source])}{via}"
        )
    given = ", ".join(f"{key} {_shape_text(shape)}" for key, shape in sorted(env_features.items()))
    parts.append(f"the env gives {given or 'no observation keys'}")
    suggestion = dict(rename_map)
    taken = set(keep)
    for key in missing + misshapen:
        for source, shape in env_features.items():
            if source not in taken and _fits(kinds[key], shapes[key], shape, resizes_images):
                suggestion[source] = key
                taken.add(source)
                break
    fixes = []
    if suggestion != rename_map:
        fixes.append("policy.rename_map={" + ", ".join(f"{a}: {b}" for a, b in suggestion.items()) + "}")
    unplaced = [key for key in missing if kinds[key] == "VISUAL" and key not in suggestion.values()]
    if pads_missing_cameras and unplaced and any(len(s) == 3 for s in env_features.values()):
        fixes.append(f"policy.blank_cameras=[{', '.join(unplaced)}] (cameras the env lacks, seen as blank)")
    if fixes:
        parts.append("fix it with " + " and ".join(fixes))
    elif any(kinds[key] == "VISUAL" for key in missing) and not any(len(s) == 3 for s in env_features.values()):
        parts.append(
            "the env renders no camera image: choose an observation type with pixels (e.g. MetaWorld's "
            "env.obs_type=pixels_agent_pos)"
        )
    elif any(kinds[key] == "VISUAL" for key in misshapen):
        parts.append("render the env's camera at the size the policy was trained on")
    else:
        parts.append("map env keys to the policy's with policy.rename_map={<env key>: <policy key>}")
    return "; ".join(parts)


def check_action_shape(policy_name: str, policy_outputs: Mapping[str, Any], action_space: Any) -> None:
    feature = policy_outputs.get("action")
    if feature is None:
        raise UserError(f"'{policy_name}' declares no 'action' output; it is not an action policy")
    expected = tuple(int(d) for d in feature.shape)
    got = tuple(getattr(action_space, "shape", None) or ())
    if expected != got:
        raise UserError(
            f"'{policy_name}' outputs actions of shape {_shape_text(expected)} but the env's action space is "
            f"{_shape_text(got)}; this checkpoint was trained for another robot or benchmark"
        )
