"""Error episodes: what the rollout does with an episode whose simulator raised in reset or step, or returned a
non-finite reward or observation.

With `eval.on_error=record` (the default) the episode runs once more from its reset in a fresh worker, with a fresh
simulator (a lost GL context, a node's transient fault); an episode is a function of (seed, task, episode index),
so a retry that succeeds records what an undisturbed run would. If it fails again it is recorded as an error
episode: its record holds the exception's line and the step (0: the reset), the traceback goes to the run's log,
and the results count it apart from the evaluated episodes (results/aggregate.py). With `eval.on_error=stop` the
first fault ends the run in one line (rollout/recovery.py).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.job_log import JOB_LOG_ONLY
from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import EnvConfig
from lerobot_hydra.envs.build_errors import env_label
from lerobot_hydra.rollout.episodes import Unit
from lerobot_hydra.rollout.recovery import Recovery, episode_label
from lerobot_hydra.vector.faults import SubEnvFailed

log = logging.getLogger("lerobot_hydra")

RECORD, STOP = "record", "stop"


class NonFinite(SubEnvFailed):
    """A sub-env's step returned a NaN or infinite reward or observation (`what` says which)."""

    def __init__(self, slot: int, what: str, call: str = "step") -> None:
        super().__init__(slot, call, f"the env returned {what}", "")
        self.what = what


def check_finite(obs: Any, reward: np.ndarray, rows: list[int], call: str) -> None:
    """Raises `NonFinite` for the first of `rows` whose reward or observation (of a `call`: reset, step) is not
    finite."""
    bad = non_finite(obs, reward, rows)
    if bad:
        slot = min(bad)
        raise NonFinite(slot, bad[slot], call)


def non_finite(obs: Any, reward: np.ndarray, rows: list[int]) -> dict[int, str]:
    """Of `rows`, those whose reward or floating-point observation holds a NaN or an infinity, and what it was."""
    bad: dict[int, str] = {}
    for i in rows:
        if not math.isfinite(float(reward[i])):
            bad[i] = f"a reward of {float(reward[i])}"
    for key, values in _float_leaves(obs, ""):
        finite = np.isfinite(values.reshape(len(values), -1)).all(axis=1)
        for i in rows:
            if not finite[i] and i not in bad:
                bad[i] = f"a non-finite observation ({key or 'observation'})"
    return bad


def _float_leaves(obs: Any, key: str) -> list[tuple[str, np.ndarray]]:
    if isinstance(obs, dict):
        return [leaf for name, value in obs.items() for leaf in _float_leaves(value, f"{key}.{name}".lstrip("."))]
    array = np.asarray(obs)
    return [(key, array)] if np.issubdtype(array.dtype, np.floating) and array.ndim >= 1 else []


class EpisodeErrors:
    """Counts each episode's faults in a segment and decides: run it again, record it as an error, or stop."""

    def __init__(self, config: EnvConfig, on_error: str, recovery: Recovery) -> None:
        self.config, self.on_error, self.recovery = config, on_error, recovery
        self.faults: Counter[Unit] = Counter()

    def failed(self, err: SubEnvFailed, unit: Unit | None, step: int) -> bool:
        """Whether `unit`, which failed at `step` (0: its reset), runs again (else it is recorded as an error).
        Raises the run-ending error with `eval.on_error=stop`, or for a fault outside any episode."""
        if self.on_error == STOP or unit is None:
            raise self._stop_error(err, unit, step)
        self.faults[unit] += 1
        retry = self.faults[unit] == 1
        what = f"{_where(err, step)} of {episode_label(unit, None)}: {err.message}"
        if retry:
            log.warning("the %s simulator failed %s; running it again in a fresh worker", env_label(self.config), what)
        else:
            log.warning(
                "the %s simulator failed again %s; recorded as an error episode (eval.on_error=record); the run "
                "goes on",
                env_label(self.config),
                what,
            )
        if err.traceback and not retry:
            log.info(
                "the traceback of the %s simulator's failure %s:\n%s",
                env_label(self.config),
                what,
                err.traceback,
                extra=JOB_LOG_ONLY,
            )
        return retry

    def _stop_error(self, err: SubEnvFailed, unit: Unit | None, step: int) -> UserError:
        if isinstance(err, NonFinite) and unit is not None:
            task, where = unit.task, _where(err, step)
            return UserError(
                f"the env {env_label(self.config)} returned {err.what} {where} of episode {unit.index} of task "
                f"{task.label} {task.name}: a broken env, whose results would be meaningless; fix the env (or "
                "eval.on_error=record to record such episodes as errors and go on)"
            )
        return self.recovery.simulator_failed(err, unit, step)


def _where(err: SubEnvFailed, step: int) -> str:
    if err.call not in ("reset", "step"):
        return f"in {err.call}()"
    return "in reset" if step == 0 else f"at step {step}"


def error_record(unit: Unit, err: SubEnvFailed, step: int, init_state: int | None, wall_s: float) -> EpisodeRecord:
    """The record of an episode that failed twice: not a success, no reward, the steps it completed."""
    return unit.record(
        success=False,
        sum_reward=0.0,
        max_reward=0.0,
        steps=max(step - 1, 0),
        wall_s=round(wall_s, 4),
        init_state_id=init_state,
        error=err.message,
        error_step=step,
    )
