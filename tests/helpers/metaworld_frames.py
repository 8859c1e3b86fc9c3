"""Counts the camera frames MetaWorld's simulators draw in this process (in-process sub-envs only)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest


def count_frames(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """A counter whose "drawn" entry grows by one for every frame an in-process MetaWorld simulator draws."""
    from lerobot_hydra.envs.metaworld import MetaWorldTaskEnv

    frames = Counter[str]()
    draw = MetaWorldTaskEnv._frame

    def counted(self: MetaWorldTaskEnv) -> np.ndarray:
        frames["drawn"] += 1
        return draw(self)

    monkeypatch.setattr(MetaWorldTaskEnv, "_frame", counted)
    return frames
