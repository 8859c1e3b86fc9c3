"""LIBERO's cameras drawn only on the steps whose observation is read (`DrawsOnDemand`).

robosuite samples a camera observable at one physics substep of each control step, on a timer that each
observable keeps; turning an observable off and on (`set_enabled`) restarts that timer, so the camera would be
sampled at another substep and its image would change. Instead every camera keeps its observable and timer, and
its sensor is swapped, through robosuite's `modify_observable`, for one that draws only when asked and otherwise
returns a blank image of the same shape. A soft reset (libero_task.py's) keeps the swapped sensors; a hard one
builds new sensors, so the swap is made again after every reset, and re-wraps a swapped sensor's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# The attribute of a swapped sensor that holds the sensor it draws with (a soft reset keeps the swapped one).
DRAWS = "lerobot_hydra_draws"


class CameraGate:
    """Which of `cameras` (robosuite camera names, observables `<camera>_image`) the next step draws."""

    def __init__(self, cameras: list[str], height: int, width: int) -> None:
        self.cameras = list(cameras)
        self.blank = np.zeros((height, width, 3), np.uint8)
        self.drawn: set[str] = set(self.cameras)

    def install(self, env: Any) -> None:
        """Swaps the camera sensors of the robosuite env `env`, drawing none until told (call after each reset)."""
        from robosuite.utils.observables import sensor

        self.drawn = set()
        for camera in self.cameras:
            name = f"{camera}_image"
            # robosuite has no public getter for an observable's sensor.
            current = env._observables[name]._sensor
            env.modify_observable(name, "sensor", self._gated(camera, getattr(current, DRAWS, current), sensor))

    def _gated(self, camera: str, draw: Callable[[dict], Any], sensor: Callable[..., Any]) -> Callable[[dict], Any]:
        @sensor(modality=draw.__modality__)  # type: ignore[attr-defined]
        def gated(obs_cache: dict) -> Any:
            return draw(obs_cache) if camera in self.drawn else self.blank

        setattr(gated, DRAWS, draw)
        return gated
