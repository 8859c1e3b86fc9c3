"""What the rollout does when a sub-env's worker is lost or its simulator raises (vector/faults.py).

A lost worker (killed by any signal, exited, or wedged past `eval.step_timeout_s`) is replaced with a fresh one,
and every episode in flight in the segment starts again from its reset: an episode is a function of (seed, task,
episode index) only, so the records equal an undisturbed run's. Episodes already recorded are untouched. A worker
lost `eval.worker_retries` + 1 times on the same episode ends the run in one line (a `UserError`).

With `eval.on_error=stop`, a simulator that raises in reset or step ends the run in one line naming the env, task,
episode and step (`SimulatorFailed`; HYDRA_FULL_ERROR=1 prints the traceback too), and is never recorded as a
failed episode; by default it is retried, then recorded as an error episode (rollout/episode_errors.py).
"""

from __future__ import annotations

import logging
from collections import Counter

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.envs.build_errors import env_label
from lerobot_hydra.rollout.episodes import Unit
from lerobot_hydra.vector.faults import SubEnvFailed, WorkerLost

log = logging.getLogger("lerobot_hydra")


class SimulatorFailed(UserError):
    """A simulator raised: one line, with the traceback kept for HYDRA_FULL_ERROR=1."""

    def __init__(self, line: str, traceback: str) -> None:
        super().__init__(line)
        self.traceback = traceback


def task_label(task: TaskSpec) -> str:
    return f"{task.task_group}/{task.task_id} {task.name}"


def episode_label(unit: Unit | None, task: TaskSpec | None) -> str:
    if unit is not None:
        return f"episode {unit.index} of task {task_label(unit.task)}"
    return f"building the simulator of task {task_label(task)}" if task is not None else "an idle sub-env"


class Recovery:
    """Counts the workers lost per episode, and turns faults into log lines and errors."""

    def __init__(self, config: EnvConfig, retries: int) -> None:
        self.config, self.retries = config, retries
        self.losses: Counter[str] = Counter()

    def lost(self, err: WorkerLost, doing: dict[int, tuple[Unit | None, TaskSpec | None]]) -> None:
        """Counts each lost worker against what it was doing (sub-env -> (episode, task)); raises the run-ending
        UserError when one was lost more than `retries` times on the same episode, else logs a warning."""
        for slot, why in sorted(err.lost.items()):
            what = episode_label(*doing.get(slot, (None, None)))
            self.losses[what] += 1
            times = self.losses[what]
            if times > self.retries:
                raise UserError(
                    f"the {env_label(self.config)} worker of sub-env {slot} {why}, {times} times running {what}; "
                    f"the episodes recorded so far are kept (rerun the same command to resume; "
                    f"eval.worker_retries={self.retries} allows more replacements)"
                )
            log.warning(
                "the %s worker of sub-env %d %s running %s; replaced it and restarted the episodes in flight "
                "(%d of eval.worker_retries=%d for this episode)",
                env_label(self.config),
                slot,
                why,
                what,
                times,
                self.retries,
            )

    def not_replaced(self, err: Exception) -> UserError:
        """The run-ending error for a replacement worker that could not start (out of memory, a broken install)."""
        return UserError(
            f"a replacement {env_label(self.config)} worker could not start ({err}); the episodes recorded so far are "
            "kept (rerun the same command to resume)"
        )

    def simulator_failed(self, err: SubEnvFailed, unit: Unit | None, step: int) -> SimulatorFailed:
        """The one-line error for a simulator that raised in `err.call` of `unit` (step 0: its reset)."""
        where = "in reset" if step == 0 else f"at step {step}"
        if err.call not in ("reset", "step"):
            where = f"in {err.call}()"
        what = episode_label(unit, None) if unit is not None else f"sub-env {err.slot}"
        return SimulatorFailed(
            f"the {env_label(self.config)} simulator raised {where} of {what}: {err.message}; a simulator fault, "
            "not a policy failure, so nothing was recorded for this episode and the run stopped (eval.on_error=stop; "
            "eval.on_error=record retries it once, then records it as an error episode and goes on); the episodes "
            "recorded so far are kept; HYDRA_FULL_ERROR=1 shows the traceback",
            err.traceback,
        )
