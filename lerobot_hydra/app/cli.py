"""Command-line plumbing around Hydra: shard sweeps checked before anything is launched, and Hydra's
composition errors reported as one line."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from lerobot_hydra.core.errors import UserError, did_you_mean
from lerobot_hydra.core.labels import job_subdir, override_values
from lerobot_hydra.launch.outcomes import SweepJobsFailed

MULTIRUN_FLAGS = ("-m", "--multirun")


def _job_subdir_resolver(job_num: Any, shard_id: Any, num_shards: Any, overrides: Any) -> str:
    task_overrides = [str(o) for o in overrides] if overrides is not None else []
    return job_subdir(int(job_num), int(shard_id), None if num_shards is None else int(num_shards), task_overrides)


# conf/config.yaml names each job dir of a sweep with this (shard jobs: <label dir>/shard_<k>_of_<N>). Registered on
# import: the submitit job processes import this module too, through the pickled task function.
OmegaConf.register_new_resolver("lerobot_hydra_job_subdir", _job_subdir_resolver, replace=True)


def _overrides(argv: list[str]) -> list[str]:
    return [a for a in argv[1:] if not a.startswith("-") and "=" in a]


def prepare_argv(argv: list[str]) -> None:
    """Checks a sweep over `eval.shard_id` and fills in `eval.num_shards` when it is left out.

    Shard ids must be exactly 0..N-1. Runs before Hydra, so a bad sweep submits nothing.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(_overrides(argv))
    except OverrideParseException:
        return  # Hydra reports parse errors itself
    by_key = {o.key_or_group: o for o in parsed}
    shard = by_key.get("eval.shard_id")
    if shard is None:
        return
    multirun = any(flag in argv for flag in MULTIRUN_FLAGS)
    if shard.is_sweep_override() and not multirun:
        raise UserError("a sweep over eval.shard_id needs multirun: add -m")
    try:
        ids = [int(v) for v in override_values(shard)]
    except ValueError as err:
        raise UserError(f"eval.shard_id must be integers, got {', '.join(override_values(shard))}") from err
    num = by_key.get("eval.num_shards")
    if num is not None and num.is_sweep_override():
        raise UserError("eval.num_shards cannot be swept; give one value (or leave it out in a shard sweep)")
    if num is None:
        if not multirun:
            return  # a single shard run: validated with its config
        total = len(ids)
        # Right after the shard override: appended after an option such as `--cfg hydra`, argparse would reject it.
        at = next(i for i, a in enumerate(argv) if i > 0 and a.lstrip("+").startswith("eval.shard_id="))
        argv.insert(at + 1, f"eval.num_shards={total}")
    else:
        try:
            total = int(override_values(num)[0])
        except ValueError as err:
            raise UserError(f"eval.num_shards must be an integer, got {override_values(num)[0]}") from err
    if not multirun:
        return
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise UserError(
            f"eval.shard_id lists {', '.join(map(str, duplicates))} more than once; give each shard id once"
        )
    expected = set(range(total))
    missing, extra = sorted(expected - set(ids)), sorted(set(ids) - expected)
    if num is None and missing:
        raise UserError(
            f"a shard sweep must list ids 0..N-1; missing {', '.join(map(str, missing))}. "
            "To run only some shards of a larger split, also give eval.num_shards=<N>"
        )
    if extra:
        raise UserError(
            f"eval.shard_id {', '.join(map(str, extra))} is out of range for eval.num_shards={total}; "
            f"shard ids run from 0 to {total - 1}"
        )


def describe_hydra_error(ex: BaseException) -> str | None:
    """One line for the composition errors a user causes with an override; None for anything else."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    if isinstance(ex, MissingConfigException) and ex.missing_cfg_file and "/" in ex.missing_cfg_file:
        group, _, name = ex.missing_cfg_file.rpartition("/")
        options = sorted(ex.options or [])
        return f"unknown {group} '{name}'{did_you_mean(name, options)}; available: {', '.join(options)}"
    if isinstance(ex, OverrideParseException):
        return f"cannot parse the override: {_first(ex)}"
    if isinstance(ex, ConfigCompositionException):
        cause = ex.__cause__
        text = _first(ex)
        if isinstance(cause, OmegaConfBaseException):
            key = getattr(cause, "full_key", "") or ""
            if isinstance(cause, (ConfigKeyError, ConfigAttributeError)):
                return f"unknown key '{key or text}'; check the spelling with: python eval.py --cfg job"
            return f"bad value for '{key}': {_first(cause)}"
        if text.startswith("Ambiguous value for argument"):
            arg = text.split("'", 1)[1].rstrip("'")
            key, _, value = arg.partition("=")
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
    the sweep when the merge callback watched them, see sweep_jobs.py)."""
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


def install_error_reporting() -> None:
    """Hydra prints composition errors over several lines; print our one line instead (HYDRA_FULL_ERROR=1 still
    shows everything)."""
    import hydra._internal.utils as hydra_utils

    original: Callable[[Callable[[], Any]], Any] = hydra_utils.run_and_report
    if getattr(original, "_lerobot_hydra", False):
        return

    def run_and_report(func: Callable[[], Any]) -> Any:
        try:
            return func()
        except Exception as ex:  # noqa: BLE001 - Hydra's own reporter handles what we do not describe
            line = None
            if os.environ.get("HYDRA_FULL_ERROR") != "1":
                line = describe_hydra_error(ex) or describe_job_error(ex)
            if line is None:
                return original(lambda error=ex: _reraise(error))
            print(f"error: {line}", file=sys.stderr)
            sys.exit(1 if isinstance(ex, SweepJobsFailed) else 2)

    run_and_report._lerobot_hydra = True  # type: ignore[attr-defined]
    hydra_utils.run_and_report = run_and_report


def _reraise(ex: BaseException) -> None:
    raise ex
