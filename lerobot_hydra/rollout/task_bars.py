"""The progress bars of a segment's tasks (`TaskWork`, rollout/plan.py) as the rollout runs them."""

from __future__ import annotations

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.rollout.plan import TaskWork
from lerobot_hydra.rollout.progress import Progress, TaskProgress


class TaskBars:
    """A progress bar per task, open from its first episode's start to its last episode's record."""

    def __init__(self, works: list[TaskWork], progress: Progress) -> None:
        self._works = {w.task: w for w in works}
        self._left = {w.task: len(w.episodes) for w in works}
        self._open: dict[TaskSpec, TaskProgress] = {}
        self._progress = progress

    def started(self, task: TaskSpec) -> None:
        if task not in self._open:
            w = self._works[task]
            self._open[task] = self._progress.start(task, w.done + len(w.episodes), w.done, w.successes)

    def recorded(self, task: TaskSpec, record: EpisodeRecord) -> None:
        self._open[task].update(record)
        self._left[task] -= 1
        if not self._left[task]:
            self._progress.finish(self._open.pop(task))

    def close(self) -> None:
        for bar in self._open.values():
            self._progress.finish(bar)
        self._open.clear()
