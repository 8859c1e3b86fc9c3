"""What a sweep says when its jobs do not all succeed: one line per job (id, the cluster's state, shard, log), then the
shard table (callbacks.py), and exit status 1.

Hydra's submitit launcher waits for its jobs in order and gives up at the first that failed, leaving the others
running unseen, with an error that names a side effect (a traceback, "has not produced any output"). The merge
callback therefore wraps the launcher when a multirun starts (`watch_submitit_jobs`): it keeps the jobs it submits,
and when one fails it waits for every other to end (Ctrl-C stops waiting; they keep running), then raises
`SweepJobsFailed`. The state named is the cluster's (SLURM's sacct, or squeue without accounting, through
submitit's watcher): CANCELLED, PREEMPTED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, FAILED; a job that stopped on a signal
adds its own status line (stopping.py) from its log.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lerobot_hydra.core.labels import combination_label
from lerobot_hydra.rollout.stopping import STATUS_PREFIX

log = logging.getLogger("lerobot_hydra")
# SLURM states of a job that has not ended yet.
UNFINISHED = {"PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "SUSPENDED", "RESIZING"}


# Every job the submitit launcher submitted in this process (the policy server's callback checks they ended).
SUBMITTED: list[Any] = []


class SweepJobsFailed(Exception):
    """Some jobs of a sweep did not succeed; the message has a line per job."""


def watch_submitit_jobs() -> None:
    """Wraps the submitit launcher (no-op without it) and has submitit's sacct warning said once."""
    try:
        from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
    except ImportError:
        return
    original: Callable[..., Any] = BaseSubmititLauncher.launch
    if getattr(original, "_lerobot_hydra", False):
        return
    logging.getLogger("submitit").addFilter(_SacctWarningOnce())

    def launch(self: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        import submitit

        submitted: list[tuple[Any, Sequence[str]]] = []
        map_array = submitit.AutoExecutor.map_array

        def recording_map_array(executor: Any, fn: Any, *iterables: Any) -> Any:
            jobs = map_array(executor, fn, *iterables)
            submitted.extend(zip(jobs, iterables[0], strict=True))  # the first argument: the job's overrides
            SUBMITTED.extend(jobs)
            return jobs

        submitit.AutoExecutor.map_array = recording_map_array  # type: ignore[method-assign]
        try:
            return original(self, job_overrides, initial_job_idx)
        except KeyboardInterrupt:
            if not submitted:
                raise
            lines = [f"  {text}" for _, text in _job_lines(submitted)]
            print("lerobot_hydra: stopped waiting (Ctrl-C); the jobs keep running:", *lines, sep="\n", file=sys.stderr)
            raise SystemExit(130) from None
        except Exception:
            if not submitted:
                raise
            _wait_for_all([job for job, _ in submitted])
            lines = _job_lines(submitted)
            failed = sum(not ok for ok, _ in lines)
            report = [f"{failed} of {len(lines)} jobs of the sweep did not succeed:", *(f"  {t}" for _, t in lines)]
            raise SweepJobsFailed("\n".join(report)) from None
        finally:
            submitit.AutoExecutor.map_array = map_array  # type: ignore[method-assign]

    launch._lerobot_hydra = True  # type: ignore[attr-defined]
    BaseSubmititLauncher.launch = launch  # type: ignore[method-assign]


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
    text = f"{head}: {_shard(overrides, with_label)}; log: {job.paths.stderr}"
    return result == "ok", text + (f"; {said}" if said else "")


def _outcome(job: Any) -> tuple[str, str]:
    """The job's outcome, "ok", "failed" (its result is an error) or "none" (no result: killed, or stopped on a
    signal), and what it said went wrong (its error, or its status line)."""
    from submitit.core.utils import pickle_load

    result_file = Path(job.paths.result_pickle)
    if result_file.exists():
        try:
            outcome, value = pickle_load(result_file)
        except Exception as err:  # noqa: BLE001 - an unreadable result is a failure to report, not to raise
            return "failed", f"its result is unreadable ({err})"
        if outcome == "success":
            status = getattr(getattr(value, "status", None), "name", "COMPLETED")
            if status == "COMPLETED":
                return "ok", ""
            return "failed", f"it raised: {_last_line(str(getattr(value, '_return_value', value)))}"
        return "failed", f"it raised: {_last_line(str(value))}"
    return "none", _status_line(Path(job.paths.stderr))


def _state(job: Any) -> str:
    try:
        state = job.get_info(mode="force").get("State") or job.state
    except Exception:  # noqa: BLE001 - no scheduler to ask (sacct and squeue both failed)
        state = "UNKNOWN"
    return str(state).split(" ")[0] if state else "UNKNOWN"


def _shard(overrides: Sequence[str], with_label: bool) -> str:
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


def _last_line(text: str) -> str:
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
