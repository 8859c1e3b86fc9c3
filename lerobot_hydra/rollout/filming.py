"""What the runner needs of whatever films episodes (publish/video.py's `VideoRecorder` provides it)."""

from __future__ import annotations

from typing import Any, Protocol

from lerobot_hydra.envs.base import TaskSpec


class FilmedEpisode(Protocol):
    def add(self, frame: Any) -> None: ...

    def finish(self) -> str | None:
        """Ends the film; returns its path relative to the run dir (None if it was aborted)."""
        ...

    def abort(self) -> None: ...

    def lost(self) -> None:
        """The env gave no frame: the film is dropped, and the recorder says so once per task group and run."""
        ...


class Filming(Protocol):
    """Films chosen episodes; shared by parallel lanes, so thread-safe."""

    def wants(self, episode_index: int) -> bool: ...

    def start(self, task: TaskSpec, episode_index: int) -> FilmedEpisode: ...
