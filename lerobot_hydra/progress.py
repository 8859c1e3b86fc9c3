"""Progress: a bar per task on a terminal, periodic single lines elsewhere (SLURM logs)."""

from __future__ import annotations

import logging
import sys
import threading
import time

from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.records import EpisodeRecord

log = logging.getLogger("lerobot_hydra")


class TaskProgress:
    def __init__(
        self, task: TaskSpec, total: int, done: int, successes: int, tty: bool, interval_s: float, position: int
    ) -> None:
        self.task, self.total, self.done, self.successes = task, total, done, successes
        self.interval_s = interval_s
        self.position = position
        self._last_line = time.monotonic()
        self._bar = None
        if tty:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                initial=done,
                desc=f"{task.label} {task.name}"[:40],
                unit="ep",
                position=position,
                leave=True,
                dynamic_ncols=True,
                file=sys.stderr,
            )
            self._refresh_bar()

    def update(self, record: EpisodeRecord) -> None:
        self.done += 1
        self.successes += int(record.success)
        if self._bar is not None:
            self._bar.update(1)
            self._refresh_bar()
        elif time.monotonic() - self._last_line >= self.interval_s:
            self._line()

    def _refresh_bar(self) -> None:
        if self._bar is not None and self.done:
            self._bar.set_postfix_str(f"success {100.0 * self.successes / self.done:.0f}%", refresh=True)

    def _line(self) -> None:
        rate = 100.0 * self.successes / self.done if self.done else 0.0
        log.info("%s %s: %d/%d episodes, %.0f%% success", self.task.label, self.task.name, self.done, self.total, rate)
        self._last_line = time.monotonic()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        else:
            self._line()


class Progress:
    def __init__(self, interval_s: float) -> None:
        self.tty = sys.stderr.isatty()
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._positions: set[int] = set()

    def start(self, task: TaskSpec, total: int, done: int, successes: int) -> TaskProgress:
        with self._lock:
            position = min(set(range(len(self._positions) + 1)) - self._positions)
            self._positions.add(position)
        return TaskProgress(task, total, done, successes, self.tty, self.interval_s, position)

    def finish(self, bar: TaskProgress) -> None:
        bar.close()
        with self._lock:
            self._positions.discard(bar.position)
