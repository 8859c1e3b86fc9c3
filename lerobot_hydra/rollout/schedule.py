"""Which pending episode a sub-env starts next: the lane's episodes in task order, mixed across tasks or not.

Mixed (a policy whose state is per batch row, sub-envs in workers): a free sub-env takes the next pending
episode whatever its task, so at a task's end the sub-envs its last episodes leave idle start the next task's
episodes while those finish. Unmixed (lockstep policies, or sub-envs sharing this process, which must never hold
two tasks' simulators): a batch holds one task's episodes, and the next task starts once the batch has ended.
Which sub-env runs an episode, and when, never changes its outcome (rollout/episodes.py `Unit`). So, mixed, a
sub-env whose simulator is already built for a task with pending episodes (kept by the Python API's warm workers,
or left by its last episode) takes that task's next episode rather than building another simulator.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from lerobot_hydra.core.records import TaskKey
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

    def drop(self, task: TaskKey) -> None:
        """Leaves the pending episodes of task `task` (a key) unrun."""
        self._pending = deque(u for u in self._pending if u.task.key != task)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def first_batch(self, n: int, bound: Sequence[TaskSpec | None] = ()) -> list[Unit]:
        """Up to `n` episodes for a batch's start, the i-th for sub-env i: the next ones, of the head task only
        unless mixed; mixed, sub-env i takes the next episode of `bound[i]` (its simulator's task) if one is
        pending."""
        batch: list[Unit] = []
        head = self._pending[0].task if self._pending else None
        while self._pending and len(batch) < n and (self.mixed or self._pending[0].task == head):
            slot = len(batch)
            batch.append(self._take(bound[slot] if slot < len(bound) else None))
        return batch

    def next_for(self, batch_task: TaskSpec, bound: TaskSpec | None = None) -> Unit | None:
        """The episode a free sub-env of a batch of `batch_task` starts: mixed, the next one of `bound` (its
        simulator's task) if one is pending, else the next one; unmixed, the next one of `batch_task`; None when
        there is none."""
        if self._pending and self.mixed:
            return self._take(bound)
        if self._pending and self._pending[0].task == batch_task:
            return self._pending.popleft()
        return None

    def _take(self, task: TaskSpec | None) -> Unit:
        """The next pending episode of `task` (mixed only), else the next one."""
        if self.mixed and task is not None and self._pending[0].task != task:
            for index, unit in enumerate(self._pending):
                if unit.task == task:
                    del self._pending[index]
                    return unit
        return self._pending.popleft()

    def upcoming_task(self, batch_task: TaskSpec) -> TaskSpec | None:
        """The task after `batch_task` once no episode of it is pending (that a free sub-env may build ahead)."""
        if self._pending and self._pending[0].task != batch_task:
            return self._pending[0].task
        return None
