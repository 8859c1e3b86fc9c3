"""Command-line plumbing around Hydra: the errors a user causes reported as one line, and the resolver that names
the job dirs of a sweep. (A shard sweep is checked by the merge callback and our launchers: launch/shards.py.)"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lerobot_hydra.core.errors import UserError, did_you_mean
from lerobot_hydra.core.labels import job_subdir
from lerobot_hydra.launch.outcomes import SweepJobsFailed
from lerobot_hydra.launch.ray_connect import ray_launcher_missing
from lerobot_hydra.launch.shards import NUM_SHARDS, SHARD_ID, num_shards_swept, shard_sweep_in_a_single_run


def job_subdir_resolver(job_num: Any, shard_id: Any, num_shards: Any, overrides: Any) -> str:
    """`${lerobot_hydra_job_subdir:...}`: conf/config.yaml names each job dir of a sweep with it (shard jobs:
    <label dir>/shard_<k>_of_<N>); registered by app/probing.py `register`."""
    task_overrides = [str(o) for o in overrides] if overrides is not None else []
    return job_subdir(int(job_num), int(shard_id), None if num_shards is None else int(num_shards), task_overrides)


def describe_hydra_error(ex: BaseException) -> str | None:
    """One line for the composition errors a user causes with an override; None for anything else."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    if isinstance(ex, MissingConfigException) and ex.missing_cfg_file and "/" in ex.missing_cfg_file:
        group, _, name = ex.missing_cfg_file.rpartition("/")
        if group == "hydra/launcher" and name == "ray":  # our ray presets default to the plugin's option
            return ray_launcher_missing()
        options = sorted(ex.options or [])
        return f"unknown {group} '{name}'{did_you_mean(name, options)}; available: {', '.join(options)}"
    if isinstance(ex, OverrideParseException):
        return f"cannot parse the override: {_first(ex)}"
    if isinstance(ex, ConfigCompositionException):
        cause = ex.__cause__
        text = _first(ex)
        if isinstance(cause, OmegaConfBaseException):
            key = getattr(cause, "full_key", "") or ""
            if key in (SHARD_ID, NUM_SHARDS) and not isinstance(cause, (ConfigKeyError, ConfigAttributeError)):
                value = getattr(cause, "value", None)
                if key == SHARD_ID:
                    return f"eval.shard_id must be integers, got {value}"
                return f"eval.num_shards must be an integer, got {value}"
            if isinstance(cause, (ConfigKeyError, ConfigAttributeError)):
                shown = "hydra" if (key or text).startswith("hydra.") else "job"  # --cfg job shows no hydra.* key
                return f"unknown key '{key or text}'; check the spelling with: python eval.py --cfg {shown}"
            return f"bad value for '{key}': {_first(cause)}"
        if text.startswith("Ambiguous value for argument"):
            arg = text.split("'", 1)[1].rstrip("'")
            key, _, value = arg.partition("=")
            if key.lstrip("+") in (SHARD_ID, NUM_SHARDS):
                return shard_sweep_in_a_single_run() if key.lstrip("+") == SHARD_ID else num_shards_swept()
            return (
                f"'{arg}' is a sweep (commas) in a single run; add -m to sweep, or pass one list value: {key}=[{value}]"
            )
        return text
    if isinstance(ex, MissingConfigException):
        return _first(ex)
    if isinstance(ex, OSError) and ex.filename:
        # A path from outside: the output dir Hydra creates (under a file, read-only, disk full), or a file the run
        # writes or reads there.
        return (
            f"cannot use {ex.filename}: {ex.strerror or _first(ex)}; check the path and its permissions (the output "
            "dir is hydra.run.dir=<dir>, or hydra.sweep.dir=<dir> with -m)"
        )
    return None


def describe_job_error(ex: BaseException) -> str | None:
    """One line for a sweep job that failed: our own errors, and submitit jobs that raised or died (a line per job of
    the sweep when our submitit launchers watched them, see launch/outcomes.py)."""
    if isinstance(ex, (UserError, SweepJobsFailed)):
        return str(ex)
    kind = type(ex).__name__
    if not type(ex).__module__.startswith("submitit"):
        return None
    lines = [line.strip() for line in str(ex).splitlines() if line.strip()]
    if kind == "FailedJobError":
        # The job's traceback; its last "<Type>: <message>" line says what went wrong.
        raised = next((line for line in reversed(lines) if ": " in line and not line.startswith("File ")), None)
        if raised and raised.split(": ", 1)[0].endswith("UserError"):
            return f"a job failed: {raised.split(': ', 1)[1]}"
        return f"a job failed with {raised or kind}; its log is under the sweep dir's .submitit/ folder"
    if kind == "UncompletedJobError":
        # "Job <id> (task: 0) with path <folder>/<id>_0_result.pkl" / "has not produced any output (state: FAILED)"
        job, _, result_path = (lines[0] if lines else "a job").partition(" with path ")
        job = job.split(" (task")[0]
        state = lines[1].rpartition("(")[2].rstrip(")") if len(lines) > 1 and "(" in lines[1] else "unknown"
        logs = str(Path(result_path).parent) if result_path else "the sweep dir's .submitit/ folder"
        return (
            f"{job} ended without a result ({state}): killed, out of memory, timed out, or failed before Python "
            f"started; its logs: {logs}"
        )
    return None


def _first(ex: BaseException) -> str:
    lines = [line.strip() for line in str(ex).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(ex).__name__


# Set while eval.py runs: it asked Hydra to re-raise (so the user did not set HYDRA_FULL_ERROR=1 themselves). Child
# processes (a policy server job, submitit jobs) inherit both variables and so still describe errors in one line.
OURS = "LEROBOT_HYDRA_DESCRIBES_ERRORS"


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Around a `@hydra.main` function: the errors a user causes end in one `error: ...` line (exit 2; a sweep with
    failed jobs: exit 1); anything else raises as it would (a traceback, exit 1).

    Hydra has no public hook for how `@hydra.main` reports an error: it prints it (over several lines) and exits,
    unless the documented environment variable HYDRA_FULL_ERROR=1 is set, when it raises it. So we set that variable
    and report here; when the user set it, everything raises untouched (tests/sweeps/test_launchers.py pins it).
    """
    describe = os.environ.get("HYDRA_FULL_ERROR") != "1" or os.environ.get(OURS) == "1"
    if describe:
        os.environ["HYDRA_FULL_ERROR"] = "1"
        os.environ[OURS] = "1"
    try:
        yield
    except Exception as ex:
        line = (describe_hydra_error(ex) or describe_job_error(ex)) if describe else None
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        sys.exit(1 if isinstance(ex, SweepJobsFailed) else 2)
