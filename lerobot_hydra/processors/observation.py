"""Raw vector-env observations -> LeRobot's batch convention.

LeRobot policies read `observation.state`, `observation.image` or `observation.images.<camera>` as
float32, images CHW in [0, 1], plus `task` (a list of language strings, one per sub-env).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_hydra.processors.pipeline import Batch

RAW_KEY = "raw"


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'pixels': {'top': a}} -> {'pixels/top': a}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


def lerobot_key(features_map: dict[str, str], raw_key: str) -> str:
    """The LeRobot key of the raw observation `raw_key` (nested keys joined with '/')."""
    return features_map.get(raw_key, f"observation.{raw_key.replace('/', '.')}")


@dataclass
class MapObservationKeys:
    """Moves the raw observation (under `raw`) to LeRobot keys; nested keys are joined with '/'.

    Raw keys missing from `features_map` are kept as `observation.<key>` so nothing disappears silently.
    An env whose observation is a plain array has the single raw key `observation`.
    """

    features_map: dict[str, str] = field(default_factory=dict)

    def __call__(self, batch: Batch) -> Batch:
        raw = batch.pop(RAW_KEY)
        if not isinstance(raw, dict):
            raw = {"observation": raw}
        for key, value in flatten(raw).items():
            batch[lerobot_key(self.features_map, key)] = value
        return batch


@dataclass
class LeRobotLayout:
    """LeRobot's array layout, in numpy: uint8 HWC images become float32 CHW in [0, 1], other numbers float32.

    Tensors are left to the policies that want them (the LeRobot loader moves the batch to torch on its device),
    so native policies and the whole env side never import torch.
    """

    def __call__(self, batch: Batch) -> Batch:
        for key, value in list(batch.items()):
            if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.number):
                continue
            if value.dtype == np.uint8 and value.ndim == 4:
                image = np.empty((value.shape[0], value.shape[3], *value.shape[1:3]), dtype=np.float32)
                # A division, not a multiplication by 1/255: bit-identical to LeRobot's own conversion.
                np.divide(value.transpose(0, 3, 1, 2), np.float32(255), out=image)
                batch[key] = image
            else:
                batch[key] = value.astype(np.float32, copy=False)
        return batch


@dataclass
class ToNumpyAction:
    """Policy output (tensor or array, batch-first) -> numpy on the CPU for the vector env."""

    def __call__(self, batch: Batch) -> Batch:
        action = batch["action"]
        if hasattr(action, "detach"):
            action = action.detach().to("cpu").numpy()
        batch["action"] = np.asarray(action)
        return batch
