"""What a sweep says when its jobs do not all succeed: one line per job (id, the cluster's state, shard, log), then the
shard table (callbacks.py), and exit status 1.

Hydra's submitit launcher waits for its jobs in order and gives up at the first that failed, leaving the others
running unseen, with an error that names a side effect (a traceback, "has not produced any output"). Our submitit
launchers (launchers.py) therefore keep the jobs they submit, and when one fails they wait for every other to end
(Ctrl-C stops waiting; they keep running), then raise `SweepJobsFailed`. The state named is the cluster's (SLURM's
sacct, or squeue without accounting, through submitit's watcher): CANCELLED, PREEMPTED, TIMEOUT, NODE_FAIL,
OUT_OF_MEMORY, FAILED; a job that stopped on a signal adds its own status line (signals.py) from its log.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lerobot_hydra.core.labels import combination_label
from lerobot_hydra.rollout.signals import STATUS_PREFIX

log = logging.getLogger("lerobot_hydra")
# SLURM states of a job that has not ended yet.
UNFINISHED = {"PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "SUSPENDED", "RESIZING"}


# Every job our submitit launchers submitted in this process (the policy server's callback checks they ended).
SUBMITTED: list[Any] = []


class SweepJobsFailed(Exception):
    """Some jobs of a sweep did not succeed; the message has a line per job."""


def say_sacct_warning_once() -> None:
    """Has submitit's "Bypassing sacct error" warning said once in this process (a filter on its logger)."""
    submitit_log = logging.getLogger("submitit")
    if not any(isinstance(f, _SacctWarningOnce) for f in submitit_log.filters):
        submitit_log.addFilter(_SacctWarningOnce())


def stopped_waiting(submitted: list[tuple[Any, Sequence[str]]]) -> SystemExit:
    """Ctrl-C while waiting for the jobs: a line per job (they keep running); exit status 130."""
    lines = [f"  {text}" for _, text in _job_lines(submitted)]
    print("lerobot_hydra: stopped waiting (Ctrl-C); the jobs keep running:", *lines, sep="\n", file=sys.stderr)
    return SystemExit(130)


def failed_jobs(submitted: list[tuple[Any, Sequence[str]]]) -> SweepJobsFailed | None:
    """Waits for every job to end (Ctrl-C stops waiting), then the error naming each job, if any did not succeed."""
    _wait_for_all([job for job, _ in submitted])
    lines = _job_lines(submitted)
    failed = sum(not ok for ok, _ in lines)
    if not failed:
        return None
    report = [f"{failed} of {len(lines)} jobs of the sweep did not succeed:", *(f"  {t}" for _, t in lines)]
    return SweepJobsFailed("\n".join(report))


def _wait_for_all(jobs: list[Any]) -> None:
    running = [job for job in jobs if not job.done()]
    if not running:
        return
    print(
        f"lerobot_hydra: a job of the sweep failed; waiting for the {len(running)} others to end "
        "(Ctrl-C stops waiting; they keep running)",
        file=sys.stderr,
        flush=True,
    )
    try:
        while not all(job.done() for job in running):
            time.sleep(1)
    except KeyboardInterrupt:
        pass


def _job_lines(submitted: list[tuple[Any, Sequence[str]]]) -> list[tuple[bool, str]]:
    """A line per job; the combination's label only when the sweep has several."""
    several = len({combination_label(list(overrides)) for _, overrides in submitted}) > 1
    return [job_line(job, overrides, several) for job, overrides in submitted]


def job_line(job: Any, overrides: Sequence[str], with_label: bool = True) -> tuple[bool, str]:
    """(succeeded, 'job <id> <what happened> (state: <the cluster's>): shard k of N, <label>; log: <path>[; ...]')."""
    result, said = _outcome(job)
    state = "" if result == "ok" else _state(job)
    if result == "ok":
        head = f"job {job.job_id} completed"
    elif result == "none" and state in UNFINISHED:
        head, said = f"job {job.job_id} is {state}", ""
    elif result == "none":
        head = f"job {job.job_id} ended without a result (state: {state})"
    else:
        head = f"job {job.job_id} failed (state: {state})"
    text = f"{head}: {shard_text(overrides, with_label)}; log: {job.paths.stderr}"
    return result == "ok", text + (f"; {said}" if said else "")


def _outcome(job: Any) -> tuple[str, str]:
    """The job's outcome, "ok", "failed" (its result is an error) or "none" (no result: killed, or stopped on a
    signal, or not ended), and what it said went wrong (its error, or its status line)."""
    if not job.done():
        return "none", _status_line(Path(job.paths.stderr))
    error = job.exception()  # submitit's FailedJobError (the job raised) or UncompletedJobError (no result)
    if error is not None and type(error).__name__ == "UncompletedJobError":
        return "none", _status_line(Path(job.paths.stderr))
    if error is not None:
        return "failed", f"it raised: {_raised(str(error))}"
    value = job.result()
    # Hydra's run_job returns the task's exception in its JobReturn (status FAILED) instead of raising it.
    status = getattr(getattr(value, "status", None), "name", "COMPLETED")
    if status == "COMPLETED":
        return "ok", ""
    return "failed", f"it raised: {last_line(str(getattr(value, '_return_value', value)))}"


def _raised(failed_job_error: str) -> str:
    """The last line of the trace in submitit's FailedJobError ("...with trace:\n---\n<trace>\n---\n<paths>")."""
    parts = failed_job_error.split("----------------------")
    return last_line(parts[1] if len(parts) > 2 else failed_job_error)


def _state(job: Any) -> str:
    try:
        state = job.get_info(mode="force").get("State") or job.state
    except Exception:  # noqa: BLE001 - no scheduler to ask (sacct and squeue both failed)
        state = "UNKNOWN"
    return str(state).split(" ")[0] if state else "UNKNOWN"


def shard_text(overrides: Sequence[str], with_label: bool) -> str:
    """'shard k of N[, label]' (the label: the combination's, when the sweep has several)."""
    values = dict(o.lstrip("+").split("=", 1) for o in overrides if "=" in o)
    parts = []
    if "eval.shard_id" in values:
        parts.append(f"shard {values['eval.shard_id']} of {values.get('eval.num_shards', '?')}")
    label = combination_label(list(overrides)) if with_label or not parts else ""
    return ", ".join(parts + [label] if label else parts) or "no shard"


def _status_line(stderr: Path) -> str:
    """The last status line a stopped run wrote to its log (stopping.print_status), if any."""
    if not stderr.exists():
        return ""
    said = STATUS_PREFIX + "stopped by"
    lines = [line for line in stderr.read_text(errors="replace").splitlines() if line.startswith(said)]
    return f"it said: {lines[-1][len(STATUS_PREFIX) :]}" if lines else ""


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


class _SacctWarningOnce(logging.Filter):
    """submitit warns "Bypassing sacct error" at every poll, through three handlers, on clusters without accounting:
    one line the first time, nothing after."""

    def __init__(self) -> None:
        super().__init__()
        self._said = False

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "Bypassing sacct error" not in message:
            return True
        if not self._said:
            self._said = True
            log.warning(
                "submitit could not ask SLURM for job states (sacct failed: %s); a job that dies may be noticed late. "
                "Said once; a cluster without accounting does this",
                message.split("Bypassing sacct error", 1)[1].split(", status may be", 1)[0].strip(),
            )
        return False
