"""Which pending episode a sub-env starts next: the lane's episodes in task order, mixed across tasks or not.

Mixed (a policy whose state is per batch row, sub-envs in workers): a free sub-env takes the next pending
episode whatever its task, so at a task's end the sub-envs its last episodes leave idle start the next task's
episodes while those finish. Unmixed (lockstep policies, or sub-envs sharing this process, which must never hold
two tasks' simulators): a batch holds one task's episodes, and the next task starts once the batch has ended.
Which sub-env runs an episode, and when, never changes its outcome (rollout/episodes.py `Unit`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.rollout.episodes import Unit


class Schedule:
    def __init__(self, units: Iterable[Unit], mixed: bool) -> None:
        self._pending = deque(units)
        self._order = {unit: position for position, unit in enumerate(self._pending)}
        self.mixed = mixed

    def put_back(self, units: Iterable[Unit]) -> None:
        """Episodes taken earlier that must run again (their worker was lost), back in their planned order."""
        self._pending = deque(sorted({*units, *self._pending}, key=self._order.__getitem__))

    def __bool__(self) -> bool:
        return bool(self._pending)

    def first_batch(self, n: int) -> list[Unit]:
        """Up to `n` episodes for a batch's start: the next ones, of the head task only unless mixed."""
        batch: list[Unit] = []
        head = self._pending[0].task if self._pending else None
        while self._pending and len(batch) < n and (self.mixed or self._pending[0].task == head):
            batch.append(self._pending.popleft())
        return batch

    def next_for(self, batch_task: TaskSpec) -> Unit | None:
        """The episode a free sub-env of a batch of `batch_task` starts: the next one when mixed, else the next
        one of `batch_task`; None when there is none."""
        if self._pending and (self.mixed or self._pending[0].task == batch_task):
            return self._pending.popleft()
        return None

    def upcoming_task(self, batch_task: TaskSpec) -> TaskSpec | None:
        """The task after `batch_task` once no episode of it is pending (that a free sub-env may build ahead)."""
        if self._pending and self._pending[0].task != batch_task:
            return self._pending[0].task
        return None
