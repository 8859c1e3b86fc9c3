"""What a Ray sweep says about its shard tasks once all have ended: one line per task (its Ray task id, what happened
to it, its shard), as outcomes.py does for submitit jobs; `SweepJobsFailed` when any did not succeed.

The cause is Ray's: the exception `ray.get` raises for a task that ended without a result names it (the task
cancelled, its worker process killed or out of memory, its node lost); a task whose job raised returns Hydra's
JobReturn with the error in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lerobot_hydra.core.labels import combination_label
from lerobot_hydra.launch.outcomes import SweepJobsFailed, last_line, shard_text

# Ray's exceptions for a task that ended without a result, by class name, and what each says happened.
CAUSES = {
    "TaskCancelledError": "the task was cancelled",
    "OutOfMemoryError": "Ray's memory monitor killed its worker: out of memory",
    "WorkerCrashedError": "its Ray worker process died: killed, out of memory, or its node lost",
    "NodeDiedError": "its node was lost",
    "ObjectLostError": "its node was lost",
    "OwnerDiedError": "the process that launched it died",
    "RuntimeEnvSetupError": "Ray could not set up its runtime_env",
    "TaskUnschedulableError": "no node of the cluster has the resources it asks for in hydra.launcher.ray.remote",
}


def task_line(task_id: str, result: Any, overrides: Sequence[str], with_label: bool) -> tuple[bool, str]:
    """(succeeded, 'task <id> <what happened>: shard k of N[, label]') for a task's result, or the exception that
    `ray.get` raised for it."""
    shard = shard_text(overrides, with_label)
    if isinstance(result, BaseException):
        cause = _cause(result)
        if cause is not None:
            return False, f"task {task_id} ended without a result ({cause}): {shard}"
        return False, f"task {task_id} failed: {shard}; it raised: {last_line(str(result))}"
    status = getattr(getattr(result, "status", None), "name", "COMPLETED")
    if status == "COMPLETED":
        return True, f"task {task_id} completed: {shard}"
    raised = last_line(str(getattr(result, "_return_value", result)))
    return False, f"task {task_id} failed: {shard}; it raised: {raised}"


def failed_tasks(outcomes: Sequence[tuple[str, Any, Sequence[str]]]) -> SweepJobsFailed | None:
    """The error naming every task of the sweep, if any did not succeed (outcomes: task id, result, overrides)."""
    several = len({combination_label(list(overrides)) for _, _, overrides in outcomes}) > 1
    lines = [task_line(task, result, overrides, several) for task, result, overrides in outcomes]
    failed = sum(not ok for ok, _ in lines)
    if not failed:
        return None
    report = [f"{failed} of {len(lines)} jobs of the sweep did not succeed:", *(f"  {text}" for _, text in lines)]
    return SweepJobsFailed("\n".join(report))


def _cause(error: BaseException) -> str | None:
    """What Ray says ended the task, for its errors that mean "no result" (None: the task itself raised)."""
    names = [cls.__name__ for cls in type(error).__mro__]
    for name in names:
        if name in CAUSES:
            return CAUSES[name]
    if "RayTaskError" in names or not type(error).__module__.startswith("ray"):
        return None
    return f"{type(error).__name__}: {last_line(str(error))}"
