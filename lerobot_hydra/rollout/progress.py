"""Progress: a bar per task on a terminal; elsewhere (SLURM logs, pipes) one log line per running task every
`interval_s` seconds, whether or not an episode ended meanwhile, and one when the task is done."""

from __future__ import annotations

import logging
import sys
import threading
import time

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import TaskSpec

log = logging.getLogger("lerobot_hydra")


class TaskProgress:
    def __init__(self, task: TaskSpec, total: int, done: int, successes: int, tty: bool, position: int) -> None:
        self.task, self.total, self.done, self.successes = task, total, done, successes
        self.position = position
        self.errors = 0  # error episodes: counted as done, left out of the success rate
        self._started = time.monotonic()
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
        self.errors += record.errored
        if self._bar is not None:
            self._bar.update(1)
            self._refresh_bar()

    def _success(self) -> str:
        evaluated = self.done - self.errors
        return f"{100.0 * self.successes / evaluated:.0f}%" if evaluated else "-"

    def _errors(self) -> str:
        return f", {self.errors} error episode(s)" if self.errors else ""

    def _refresh_bar(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(f"success {self._success()}{self._errors()}", refresh=True)

    def line(self) -> None:
        log.info(
            "%s %s: %d/%d episodes, %s success%s, %.0f s",
            self.task.label,
            self.task.name,
            self.done,
            self.total,
            self._success(),
            self._errors(),
            time.monotonic() - self._started,
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        else:
            self.line()


class Progress:
    def __init__(self, interval_s: float, tty: bool | None = None) -> None:
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._running: dict[int, TaskProgress] = {}  # by bar position
        self._wake = threading.Condition(self._lock)
        self._ticker: threading.Thread | None = None

    def start(self, task: TaskSpec, total: int, done: int, successes: int) -> TaskProgress:
        with self._lock:
            position = min(set(range(len(self._running) + 1)) - set(self._running))
            bar = TaskProgress(task, total, done, successes, self.tty, position)
            self._running[position] = bar
            if not self.tty and self._ticker is None:
                self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
                self._ticker.start()
        return bar

    def finish(self, bar: TaskProgress) -> None:
        bar.close()
        with self._lock:
            self._running.pop(bar.position, None)
            self._wake.notify_all()

    def _tick(self) -> None:
        """Every `interval_s`, a line per running task; ends when no task is running."""
        with self._lock:
            deadline = time.monotonic() + self.interval_s
            while self._running:
                self._wake.wait(max(0.0, deadline - time.monotonic()))
                if time.monotonic() >= deadline:
                    for bar in sorted(self._running.values(), key=lambda b: b.position):
                        bar.line()
                    deadline = time.monotonic() + self.interval_s
            self._ticker = None
