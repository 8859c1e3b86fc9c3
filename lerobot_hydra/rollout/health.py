"""Unhealthy tasks and shards: error episodes (rollout/episode_errors.py) that say the fault is not one episode's.

- A task whose first `UNHEALTHY_AFTER` episodes recorded in this session are all error episodes is stopped: its
  other episodes are left for a rerun (they are not recorded), with one warning line naming the likely cause.
- A run (a shard) whose first `UNHEALTHY_AFTER` episodes recorded in this session are all error episodes stops at
  once in one line (`Unhealthy`): an unhealthy node (its GL/EGL driver, its GPU, its disk) or a broken env config,
  rather than a few bad initial states. The records so far are kept; with dynamic claims its claims are released at
  once so that the other shards take them (run/sources/claims.py); the same command on a healthy node runs the rest.
"""

from __future__ import annotations

from collections import Counter

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import EpisodeRecord, TaskKey

# Error episodes in a row, from a task's (or the run's) first one recorded in a session, that stop it.
UNHEALTHY_AFTER = 3


class Unhealthy(UserError):
    """The run's first episodes all failed in the simulator: it stops."""


class TaskBroken(Exception):
    """A task's first episodes all failed in the simulator: its other episodes are left (`line` says why)."""

    def __init__(self, key: TaskKey, line: str) -> None:
        super().__init__(line)
        self.key, self.line = key, line


class Health:
    """Watches the records of a session as they come, from the first one."""

    def __init__(self, after: int = UNHEALTHY_AFTER) -> None:
        self.after = after
        self.first: list[EpisodeRecord] = []  # the session's first `after` records
        self.evaluated: set[TaskKey] = set()  # tasks with an evaluated episode in this session
        self.errors: Counter[TaskKey] = Counter()
        self.stopped: set[TaskKey] = set()
        self.unhealthy = False  # set when the session's first records were all error episodes

    def recorded(self, record: EpisodeRecord) -> None:
        """Raises `Unhealthy` when the session's first records are all error episodes, `TaskBroken` when this is
        the record that makes its task's first ones all error episodes."""
        if len(self.first) < self.after:
            self.first.append(record)
            if len(self.first) == self.after and all(r.errored for r in self.first):
                self.unhealthy = True
                raise Unhealthy(
                    f"the first {self.after} episodes of this run all failed in the simulator (the last: "
                    f"{_what(record)}): likely an unhealthy node (its GL/EGL driver, GPU or disk) or a broken env "
                    "config, not a few bad episodes; it stopped with its records kept (with dynamic claims its "
                    "claims were released to the other shards); check the log, then run the same command on a "
                    "healthy node, which runs the rest"
                )
        key = record.task_key
        if not record.errored:
            self.evaluated.add(key)
            return
        self.errors[key] += 1
        if key not in self.evaluated and key not in self.stopped and self.errors[key] == self.after:
            self.stopped.add(key)
            raise TaskBroken(
                key,
                f"the first {self.after} episodes of task {record.task_group}/{record.task_id} {record.task_name} "
                f"all failed in the simulator (the last: "
                f"{_what(record)}): likely a broken task (its assets, its initial states) or env config; its other "
                "episodes are not run (the same command runs them)",
            )


def _what(record: EpisodeRecord) -> str:
    where = "in reset" if not record.error_step else f"at step {record.error_step}"
    return f"episode {record.episode_index}, {where}: {record.error}"
