"""Merge a sweep's shards: shard files -> episode records -> the same aggregation and outputs as one run.

Shard files (`shard_<k>_of_<N>.json`, anywhere under the sweep dir) are grouped into combinations by their
config fingerprint and shard count; each combination must hold every shard id 0..N-1 once, each complete, with
exactly the episodes its plan assigns it. A combination that passes is merged from its episode records
(nothing is averaged twice; eval_s is the sum over shards) and published: with one combination into
`<sweep_dir>/eval_info.json`, with several into `<sweep_dir>/<name>/eval_info.json` (name: the overrides that
tell the combinations apart, e.g. `policy=random`), plus a sweep summary.
Unsharded runs (N=1) already published their own eval_info.json; they only appear in the summary.
A combination with any problem is never written; every problem is one line that says how to fix it. A shard
whose dir a live process has locked is still running and never merged; the merge itself holds the lock of
every dir it writes into.

`lerobot-hydra-merge <sweep_dir>` runs this by hand; `callbacks.MergeShards` runs it when a multirun ends.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lerobot_hydra import provenance
from lerobot_hydra.commands import hydra_override, shell_command
from lerobot_hydra.durable import remove_temporaries
from lerobot_hydra.errors import UserError
from lerobot_hydra.records import read_jsonl, sort_records
from lerobot_hydra.results import aggregate
from lerobot_hydra.runlock import DirLock
from lerobot_hydra.shard_file import Shard, ShardFileError, find_shard_files, load_shard, saved_overrides
from lerobot_hydra.sharding import (
    distinguishing_labels,
    is_shard_override,
    job_subdir,
    label_dir_name,
    plan_size,
    shard_dir_name,
    shard_plan,
)
from lerobot_hydra.store import EPISODES_FILE, diff_keys, fingerprint

# Hydra overrides that a re-run command must not copy: the sweep/run location is given explicitly.
_LOCATION_OVERRIDES = ("hydra.sweep.dir=", "hydra.run.dir=", "hydra.sweep.subdir=", "hydra.mode=")

Unit = tuple[str, int, int]


@dataclass
class Combination:
    """Shards of one configuration and one split: the unit that is merged."""

    fingerprint: str
    num_shards: int
    shards: list[Shard]
    # What tells it apart from the sweep's other combinations (its label without the overrides all share).
    name: str = ""

    @property
    def label(self) -> str:
        """The most common label of its shards (labels may differ in settings that never change outcomes)."""
        counts = Counter(s.label for s in self.shards)
        return max(sorted(counts), key=lambda label: counts[label])

    @property
    def title(self) -> str:
        name = self.name or self.label
        return f"'{name}'" if name else "the sweep"


@dataclass
class MergeResult:
    sweep_dir: Path
    problems: list[str] = field(default_factory=list)
    # How many of the problems are shards that were never started (a sweep over some shards expects those).
    missing: int = 0
    # (combination, merged eval_info) of every combination that passed its checks
    merged: list[tuple[Combination, dict[str, Any]]] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def group_combinations(shards: list[Shard]) -> list[Combination]:
    groups: dict[tuple[str, int], list[Shard]] = {}
    for shard in shards:
        groups.setdefault((shard.fingerprint, shard.num_shards), []).append(shard)
    return [
        Combination(fp, n, sorted(group, key=lambda s: (s.shard_id, str(s.path)))) for (fp, n), group in groups.items()
    ]


def missing_shards(combo: Combination, sweep_dir: Path) -> list[str]:
    """A line for each shard id of 0..N-1 that has no shard file, with the command that runs it."""
    present = {s.shard_id for s in combo.shards}
    return [
        f"{combo.title}: shard {shard_id} of {combo.num_shards} is missing; run it: "
        f"{rerun_command(combo, shard_id, sweep_dir)}"
        for shard_id in range(combo.num_shards)
        if shard_id not in present
    ]


def check_combination(combo: Combination, sweep_dir: Path) -> list[str]:
    """Every reason not to merge this combination besides missing shards, one line each."""
    problems = []
    by_id: dict[int, list[Shard]] = {}
    for shard in combo.shards:
        by_id.setdefault(shard.shard_id, []).append(shard)
    for shard_id, copies in sorted(by_id.items()):
        if len(copies) > 1:
            where = ", ".join(f"{s.dir} ({_progress(s)})" for s in copies)
            keep = max(copies, key=lambda s: (s.complete, len(s.records)))
            problems.append(
                f"{combo.title}: shard {shard_id} of {combo.num_shards} was run {len(copies)} times with the same "
                f"configuration: {where}; keep {keep.dir}, move the other copies out of {sweep_dir}"
            )
    if problems:
        return problems  # every episode of a repeated shard would also be reported twice below
    reference = combo.shards[0]
    seen: dict[Unit, Shard] = {}
    for shard in combo.shards:
        problems.extend(_check_shard(shard, reference, combo, sweep_dir))
        for record in shard.records:
            first = seen.setdefault(record.unit, shard)
            if first is not shard:
                problems.append(
                    f"{combo.title}: episode {_unit(record.unit)} appears in {first.name} ({first.path}) and in "
                    f"{shard.name} ({shard.path}); re-run one of them in a new dir"
                )
    return problems


def _check_shard(shard: Shard, reference: Shard, combo: Combination, sweep_dir: Path) -> list[str]:
    if fingerprint(shard.identity) != shard.fingerprint:
        return [f"{shard.path}: its fingerprint does not match its recorded configuration (edited?); re-run that shard"]
    if shard.task_keys != reference.task_keys:
        return [
            f"{combo.title}: {shard.name} ({shard.path}) lists other tasks than {reference.name} "
            f"({reference.path}), though their configs agree (another benchmark version?); re-run it"
        ]
    if shard.running is not None:
        return [
            f"{combo.title}: {shard.name} is still running in {shard.dir} ({shard.running}); merge once it has ended"
        ]
    expected = shard_plan(shard.task_keys, int(shard.identity.get("n_episodes", 0)), shard.shard_id, shard.num_shards)
    if shard.plan != expected:
        return [f"{shard.path}: its planned episodes are not {shard.name} of its configuration; re-run that shard"]
    blocks = {b.key: b.episodes for b in expected}
    planned_count = plan_size(expected)
    units = [r.unit for r in shard.records]
    twice = sorted(u for u, n in Counter(units).items() if n > 1)
    if twice:
        return [
            f"{shard.path}: episode {_unit(twice[0])} is recorded {Counter(units)[twice[0]]} times; re-run that shard"
        ]
    extra = sorted(u for u in units if u[2] not in blocks.get(u[:2], ()))
    if extra:
        return [
            f"{shard.path}: holds {len(extra)} episode(s) outside its plan, e.g. {_unit(extra[0])}; "
            "re-run that shard in a new dir"
        ]
    if not shard.complete or len(units) != planned_count:
        # The records of a shard that has not ended are in episodes.jsonl (the shard file has them at the end).
        recorded = {r.unit for r in read_jsonl(shard.dir / EPISODES_FILE) if r.unit[2] in blocks.get(r.unit[:2], ())}
        return [
            f"{combo.title}: {shard.name} is incomplete ({len(recorded | set(units))} of {planned_count} episodes) "
            f"in {shard.dir}; resume it: {rerun_command(combo, shard.shard_id, sweep_dir, shard)}"
        ]
    return []


def _unit(unit: Unit) -> str:
    group, task_id, episode = unit
    return f"{group}/{task_id} #{episode}"


def _progress(shard: Shard) -> str:
    return f"{len(shard.records)} of {plan_size(shard.plan)} episodes"


def conflicting_labels(combos: list[Combination]) -> tuple[list[str], set[int]]:
    """Combinations that share a label but not a configuration or split: the config changed between shard runs,
    or shards of another split were added to the sweep dir. Returns problems and the indices involved."""
    problems: list[str] = []
    involved: set[int] = set()
    by_label: dict[str, list[int]] = {}
    for i, combo in enumerate(combos):
        by_label.setdefault(combo.label, []).append(i)
    for label, indices in by_label.items():
        if len(indices) < 2:
            continue
        involved.update(indices)
        first = combos[indices[0]]
        parts = []
        for i in indices:
            ids = ", ".join(str(s.shard_id) for s in combos[i].shards)
            parts.append(f"shards {ids} of {combos[i].num_shards} in {_common_dir(combos[i])}")
        if all(combos[i].fingerprint == first.fingerprint for i in indices):
            why = "were split into different numbers of shards"
        else:
            keys = sorted(
                {k for i in indices[1:] for k in diff_keys(first.shards[0].identity, combos[i].shards[0].identity)}
            )
            why = f"were run with different configurations (differ in: {', '.join(keys[:6])})"
        title = f"'{label}'" if label else "the sweep"
        problems.append(
            f"{title}: {'; '.join(parts)} {why}; keep one set (re-run the others with its config) "
            "or give each its own sweep dir"
        )
    return problems, involved


def _common_dir(combo: Combination) -> Path:
    return Path(os.path.commonpath([s.dir for s in combo.shards]))


def rerun_command(combo: Combination, shard_id: int, sweep_dir: Path, shard: Shard | None = None) -> str:
    """The command that (re)runs shard `shard_id` of `combo` where the merge will find it (resuming `shard`)."""
    source = shard or combo.shards[0]
    task_overrides, hydra_overrides = saved_overrides(source.dir)
    if task_overrides is None:
        where = shard.dir if shard else sweep_dir / shard_dir_name(shard_id, combo.num_shards)
        return (
            f"python eval.py {shlex.quote(hydra_override('hydra.run.dir', str(where)))} "
            f"<the same overrides as its other shards> eval.shard_id={shard_id} eval.num_shards={combo.num_shards}"
        )
    # The saved overrides are as the user typed them (Hydra syntax already); the paths are quoted here.
    overrides = [o for o in task_overrides if not is_shard_override(o)]
    overrides += [f"eval.shard_id={shard_id}", f"eval.num_shards={combo.num_shards}"]
    in_sweep_layout = source.dir == sweep_dir / job_subdir(0, source.shard_id, combo.num_shards, task_overrides)
    if in_sweep_layout:
        location = ["-m", hydra_override("hydra.sweep.dir", str(sweep_dir))]
        location += [o for o in hydra_overrides if not o.startswith(_LOCATION_OVERRIDES)]
    else:
        target = shard.dir if shard else source.dir.parent / shard_dir_name(shard_id, combo.num_shards)
        location = [hydra_override("hydra.run.dir", str(target))]
    return shell_command(["python", "eval.py", *location, *overrides])


def merged_info(combo: Combination, out_dir: Path) -> dict[str, Any]:
    """eval_info of the whole combination, aggregated from every episode record of its shards, with video paths
    relative to `out_dir` (where it is written)."""
    from lerobot_hydra.video import rebase_video_paths

    records = [r for s in combo.shards for r in rebase_video_paths(s.records, s.dir, out_dir)]
    info = aggregate(sort_records(records, combo.shards[0].task_keys), sum(s.eval_s for s in combo.shards))
    return {**info, "provenance": provenance.merged([s.provenance for s in combo.shards])}


def merge_sweep(
    sweep_dir: Path, write: bool = True, baseline: str | None = None, accept_version_mismatch: bool = False
) -> MergeResult:
    """Check every combination under `sweep_dir` and (with `write`) publish each one that passes, and with
    several a summary comparing them with `baseline` (see `summary.pick_baseline`; None: the first). Shards whose
    outcome-relevant versions differ are refused unless `accept_version_mismatch`."""
    sweep_dir = sweep_dir.resolve()
    result = MergeResult(sweep_dir)
    if not sweep_dir.is_dir():
        result.problems.append(f"{sweep_dir} is not a directory; give the sweep dir (hydra.sweep.dir) of a multirun")
        return result
    shards = []
    for path in find_shard_files(sweep_dir):
        try:
            shards.append(load_shard(path))
        except ShardFileError as err:
            result.problems.append(str(err))
    if not shards:
        if not result.problems:
            result.problems.append(
                f"no shard files (shard_<k>_of_<N>.json) under {sweep_dir}; is it the sweep dir of a multirun?"
            )
        return result
    if result.problems:
        # A shard file that cannot be read belongs to an unknown combination: merge nothing.
        return result
    combos = group_combinations(shards)
    label_problems, conflicted = conflicting_labels(combos)
    result.problems.extend(label_problems)
    several = len(combos) > 1
    for combo, name in zip(combos, distinguishing_labels([c.label for c in combos]), strict=True):
        combo.name = name if several else combo.label
    for i, combo in enumerate(combos):
        if i in conflicted:
            continue
        missing = missing_shards(combo, sweep_dir)
        problems = check_combination(combo, sweep_dir)
        if not problems and not missing:
            accept = shell_command(["lerobot-hydra-merge", "--accept-version-mismatch", str(sweep_dir)])
            versions = [(s.name, s.provenance) for s in combo.shards]
            problems = provenance.mismatch_problems(combo.title, versions, accept, accept_version_mismatch)
        result.problems.extend(problems + missing)
        result.missing += len(missing)
        if not problems and not missing:
            result.merged.append((combo, merged_info(combo, output_dir(sweep_dir, combo, several))))
    from lerobot_hydra.summary import baseline_problems  # (scipy) only once there is something to merge

    result.problems.extend(baseline_problems(baseline, combos))
    if write:
        _publish(result, several, baseline)
    return result


def output_dir(sweep_dir: Path, combo: Combination, several: bool) -> Path:
    """Where a combination's merged eval_info.json goes: the sweep dir, or with several combinations a folder
    named after its label; an unsharded run keeps its own dir."""
    if combo.num_shards == 1:
        return combo.shards[0].dir
    return sweep_dir / label_dir_name(combo.name or "default") if several else sweep_dir


def _publish(result: MergeResult, several: bool, baseline: str | None) -> None:
    """Writes every merged combination while holding the lock of each dir it writes into."""
    targets = {output_dir(result.sweep_dir, combo, several) for combo, _ in result.merged if combo.num_shards > 1}
    if several and result.ok:
        targets.add(result.sweep_dir)
    with contextlib.ExitStack() as locks:
        try:
            for target in sorted(targets):
                locks.enter_context(DirLock(target, "a merge", advice="wait until it has ended, then merge again"))
        except UserError as err:
            result.problems.append(str(err))
            return
        for target in targets:
            remove_temporaries(target)  # left by a merge that was killed while writing
        _write_merged(result, several, baseline)


def _write_merged(result: MergeResult, several: bool, baseline: str | None) -> None:
    from lerobot_hydra.loggers import saved_run_config
    from lerobot_hydra.reporting import EVAL_INFO_FILE, publish_merged
    from lerobot_hydra.summary import publish_summary, sweep_entry

    entries = []
    for combo, info in result.merged:
        if combo.num_shards > 1:
            out_dir = output_dir(result.sweep_dir, combo, several)
            title = f"Merged {combo.num_shards} shards" + (f" of {combo.name}" if combo.name else "")
            publish_merged(
                info,
                out_dir,
                title,
                sweep_dir=result.sweep_dir,
                label=combo.label,
                config=saved_run_config(combo.shards[0].dir),
                num_shards=combo.num_shards,
            )
            eval_info = out_dir / EVAL_INFO_FILE
            result.written.append(eval_info)
        else:
            eval_info = combo.shards[0].dir / EVAL_INFO_FILE
        entries.append(sweep_entry(combo, info, eval_info))
    if several and result.ok:
        config = saved_run_config(result.merged[0][0].shards[0].dir)
        result.problems.extend(publish_summary(entries, result.sweep_dir, baseline, config))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lerobot-hydra-merge",
        description="Merge the shards of a lerobot_hydra sweep into one eval_info.json per combination.",
    )
    parser.add_argument("sweep_dir", type=Path, help="the multirun's hydra.sweep.dir (searched recursively)")
    parser.add_argument(
        "--check", action="store_true", help="only report what is missing or inconsistent; write nothing"
    )
    parser.add_argument(
        "--baseline",
        help="the configuration the others are compared with: its overrides or values, e.g. policy=random "
        "(default: the sweep's first)",
    )
    parser.add_argument(
        "--accept-version-mismatch",
        action="store_true",
        help="merge shards whose outcome-relevant versions (torch, mujoco, simulators, lerobot) differ; "
        "the merged provenance lists the differences",
    )
    args = parser.parse_args(argv)
    result = merge_sweep(
        args.sweep_dir,
        write=not args.check,
        baseline=args.baseline,
        accept_version_mismatch=args.accept_version_mismatch,
    )
    for problem in result.problems:
        print(f"error: {problem}", file=sys.stderr)
    if args.check and result.ok:
        print(f"{args.sweep_dir}: {len(result.merged)} combination(s), every shard complete and consistent")
    if not args.check and result.ok and not result.written and len(result.merged) == 1:
        combo = result.merged[0][0]
        print(f"{args.sweep_dir}: one unsharded run, nothing to merge; its results: {combo.shards[0].dir}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
