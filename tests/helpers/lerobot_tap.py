"""A processor step that records what reaches a LeRobot policy: put first in a checkpoint's preprocessor, it
saves each call's observation tensors to `$LEROBOT_HYDRA_TAP_DIR/<call>.npz` (nothing when that is unset).

LeRobot imports a step that its pipeline JSON names by `class`, so the same checkpoint records the inputs of
`lerobot-eval` and of eval.py alike (with this repo on PYTHONPATH), and the two runs' inputs compare step by step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from lerobot.processor import ProcessorStep, TransitionKey

TAP_ENV = "LEROBOT_HYDRA_TAP_DIR"


@dataclass
class ObservationTap(ProcessorStep):
    calls: int = 0

    def __call__(self, transition: Any) -> Any:
        directory = os.environ.get(TAP_ENV)
        if directory:
            import torch

            observation = transition[TransitionKey.OBSERVATION] or {}
            arrays = {key: v.detach().cpu().numpy() for key, v in observation.items() if isinstance(v, torch.Tensor)}
            Path(directory).mkdir(parents=True, exist_ok=True)
            np.savez(Path(directory) / f"{self.calls:05d}.npz", **arrays)
            self.calls += 1
        return transition

    def get_config(self) -> dict[str, Any]:
        return {}

    def transform_features(self, features: Any) -> Any:
        return features


def tapped_calls(directory: Path) -> list[dict[str, np.ndarray]]:
    """The recorded observations, one dict of arrays per preprocessor call, in call order."""
    return [dict(np.load(path)) for path in sorted(directory.glob("*.npz"))]
