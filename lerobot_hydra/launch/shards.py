"""A sweep over `eval.shard_id`: its ids checked before anything is launched, and `eval.num_shards` filled in.

The merge callback (callbacks.py) checks the sweep's overrides when the multirun starts, before any job or policy
server is submitted; our launchers (launchers.py) add `eval.num_shards=<N>` to each job's overrides when the sweep
leaves it out, right after its `eval.shard_id=<k>`, as if it had been typed there.
"""

from __future__ import annotations

from collections.abc import Sequence

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.labels import override_values

SHARD_ID = "eval.shard_id"
NUM_SHARDS = "eval.num_shards"


def shard_sweep_total(task_overrides: Sequence[str]) -> int | None:
    """The number of shards a multirun's overrides split into, to fill in as `eval.num_shards` (None: nothing to
    fill in: no shard sweep, or eval.num_shards given). Raises UserError for ids that are not exactly 0..N-1."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    by_key = {o.key_or_group: o for o in OverridesParser.create().parse_overrides([str(o) for o in task_overrides])}
    shard, num = by_key.get(SHARD_ID), by_key.get(NUM_SHARDS)
    if shard is None:
        return None
    try:
        ids = [int(v) for v in override_values(shard)]
    except ValueError as err:
        raise UserError(f"eval.shard_id must be integers, got {', '.join(override_values(shard))}") from err
    if num is not None and num.is_sweep_override():
        raise UserError(num_shards_swept())
    if num is None:
        total = len(ids)
    else:
        try:
            total = int(override_values(num)[0])
        except ValueError as err:
            raise UserError(f"eval.num_shards must be an integer, got {override_values(num)[0]}") from err
    _check_ids(ids, total, given=num is not None)
    return None if num is not None else total


def _check_ids(ids: list[int], total: int, given: bool) -> None:
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise UserError(
            f"eval.shard_id lists {', '.join(map(str, duplicates))} more than once; give each shard id once"
        )
    expected = set(range(total))
    missing, extra = sorted(expected - set(ids)), sorted(set(ids) - expected)
    if not given and missing:
        raise UserError(
            f"a shard sweep must list ids 0..N-1; missing {', '.join(map(str, missing))}. "
            "To run only some shards of a larger split, also give eval.num_shards=<N>"
        )
    if extra:
        raise UserError(
            f"eval.shard_id {', '.join(map(str, extra))} is out of range for eval.num_shards={total}; "
            f"shard ids run from 0 to {total - 1}"
        )


def with_num_shards(job_overrides: Sequence[Sequence[str]], total: int | None) -> list[list[str]]:
    """Each job's overrides with `eval.num_shards=<total>` right after its shard id (unchanged when total is None)."""
    jobs = []
    for overrides in job_overrides:
        job = list(overrides)
        if total is not None:
            at = next(i for i, o in enumerate(job) if o.lstrip("+").startswith(f"{SHARD_ID}="))
            job.insert(at + 1, f"{NUM_SHARDS}={total}")
        jobs.append(job)
    return jobs


def shard_sweep_in_a_single_run() -> str:
    return "a sweep over eval.shard_id needs multirun: add -m"


def num_shards_swept() -> str:
    return "eval.num_shards cannot be swept; give one value (or leave it out in a shard sweep)"
