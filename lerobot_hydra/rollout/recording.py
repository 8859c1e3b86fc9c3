"""What the runner needs of whatever records every step of the episodes (publish/recording.py's `DatasetRecorder`
provides it): each episode's steps, handed over when its record is, written once the run store accepts the record.

A run hands its recorder to the rollout (`LaneSettings.recorder`); its lanes' threads share it.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

Step = dict[str, Any]  # one step: observation (flattened raw keys), action, reward, done, success


class StepRecorder(Protocol):
    """Thread-safe: parallel lanes hand their episodes to the same recorder."""

    def prepare(self) -> None:
        """Loads what writing needs (slow imports); called by the lanes once their policy is built and their envs
        are started (no other thread of the run imports then), while async workers build their simulators."""
        ...

    def hold(self, unit: tuple[str, int, int], steps: list[Step]) -> None:
        """The steps of the episode `unit` (task group, task id, episode index), which has just ended; they are
        written when its record is accepted, and replaced if the episode runs again."""
        ...


def observation_row(obs: Any, row: int, prefix: str = "") -> dict[str, np.ndarray]:
    """Row `row` of a batched raw observation, nested keys joined with '/' (as in `EnvConfig.features_map`)."""
    if isinstance(obs, dict):
        out: dict[str, np.ndarray] = {}
        for key, value in obs.items():
            out.update(observation_row(value, row, f"{prefix}{key}/"))
        return out
    return {prefix.rstrip("/") or "observation": np.array(obs[row])}
