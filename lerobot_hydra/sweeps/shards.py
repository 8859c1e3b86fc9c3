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
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lerobot_hydra.core.commands import shell_command
from lerobot_hydra.core.durable import remove_temporaries
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.labels import distinguishing_labels, label_dir_name
from lerobot_hydra.core.layout import EVAL_INFO_FILE, SUMMARY_FILE
from lerobot_hydra.core.records import sort_records
from lerobot_hydra.loggers.bounded import bounded_exit
from lerobot_hydra.results.aggregate import Results, aggregate
from lerobot_hydra.results.export import FORMATS, render_all
from lerobot_hydra.results.export_tables import results_table
from lerobot_hydra.rollout import provenance
from lerobot_hydra.store.lock import DirLock
from lerobot_hydra.store.shard_file import ShardFileError, find_shard_files, load_shard
from lerobot_hydra.sweeps.checks import (
    Combination,
    check_combination,
    conflicting_labels,
    group_combinations,
    missing_shards,
    unplanned_records,
)
from lerobot_hydra.sweeps.duplicates import drop_identical_copies
from lerobot_hydra.sweeps.sequential_state import final_summary, sweep_baseline
from lerobot_hydra.sweeps.summary_export import sweep_tables


@dataclass
class MergeResult:
    sweep_dir: Path
    problems: list[str] = field(default_factory=list)
    # How many of the problems are shards that were never started (a sweep over some shards expects those).
    missing: int = 0
    # What the merge did that a user should know of (an episode recorded twice, identically, merged once).
    notes: list[str] = field(default_factory=list)
    # Records the merge left out, one line per file (a record outside its shard's plan).
    warnings: list[str] = field(default_factory=list)
    # (combination, merged results) of every combination that passed its checks
    merged: list[tuple[Combination, Results]] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def n_errors(self) -> int:
        """Error episodes in the merged combinations."""
        return sum(results.overall.n_errors for _, results in self.merged)


def merged_results(combo: Combination, out_dir: Path) -> Results:
    """The results of the whole combination, aggregated from every episode record of its shards, with video paths
    relative to `out_dir` (where they are written)."""
    from lerobot_hydra.publish.video import rebase_video_paths

    records = [r for s in combo.shards for r in rebase_video_paths(s.records, s.dir, out_dir)]
    return aggregate(
        sort_records(records, combo.shards[0].task_keys),
        sum(s.eval_s for s in combo.shards),
        provenance.merged([s.provenance for s in combo.shards]),
    )


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
    for combo in combos:
        drop_superseded_errors(combo)
    label_problems, conflicted = conflicting_labels(combos)
    result.problems.extend(label_problems)
    several = len(combos) > 1
    for combo, name in zip(combos, distinguishing_labels([c.label for c in combos]), strict=True):
        combo.name = name if several else combo.label
    for i, combo in enumerate(combos):
        if i in conflicted:
            continue
        missing = missing_shards(combo, sweep_dir)
        result.notes.extend(drop_identical_copies(combo))
        result.warnings.extend(unplanned_records(combo))
        problems = check_combination(combo, sweep_dir)
        if not problems and not missing:
            accept = shell_command(["lerobot-hydra-merge", "--accept-version-mismatch", str(sweep_dir)])
            versions = [(s.name, s.provenance) for s in combo.shards]
            problems = provenance.mismatch_problems(combo.title, versions, accept, accept_version_mismatch)
        result.problems.extend(problems + missing)
        result.missing += len(missing)
        if not problems and not missing:
            merged = merged_results(combo, output_dir(sweep_dir, combo, several))
            result.merged.append((combo, merged.with_sequential(final_summary(sweep_dir, combo.label))))
    from lerobot_hydra.sweeps.summary import baseline_problems  # (scipy) only once there is something to merge

    result.problems.extend(baseline_problems(baseline, combos))
    if write:
        _publish(result, several, baseline)
    return result


def drop_superseded_errors(combo: Combination) -> None:
    """Leaves out each error episode that another shard of `combo` evaluated (with dynamic claims, a shard that
    takes over a released block runs its error episodes again): that one record of the episode is merged."""
    evaluated = {r.unit for s in combo.shards for r in s.records if not r.errored}
    for shard in combo.shards:
        shard.records = [r for r in shard.records if not (r.errored and r.unit in evaluated)]


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
    from lerobot_hydra.loggers.run_meta import saved_run_config
    from lerobot_hydra.publish.publish import publish_merged
    from lerobot_hydra.publish.recording_parts import merge_recordings
    from lerobot_hydra.sweeps.summary import publish_summary, sweep_entry

    entries = []
    for combo, results in result.merged:
        if combo.num_shards > 1:
            out_dir = output_dir(result.sweep_dir, combo, several)
            title = f"Merged {combo.num_shards} shards" + (f" of {combo.name}" if combo.name else "")
            publish_merged(
                results,
                out_dir,
                title,
                sweep_dir=result.sweep_dir,
                label=combo.label,
                config=saved_run_config(combo.shards[0].dir),
                num_shards=combo.num_shards,
            )
            eval_info = out_dir / EVAL_INFO_FILE
            result.written.append(eval_info)
            units = {r.unit for r in results.episodes}
            recorded = merge_recordings([s.dir for s in combo.shards], out_dir, units)
            result.written.extend([recorded] if recorded is not None else [])
        else:
            eval_info = combo.shards[0].dir / EVAL_INFO_FILE
        entries.append(sweep_entry(combo, results, eval_info))
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
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="console",
        help="also print, as markdown, latex or csv, the sweep summary's tables (sweep_summary.md/.tex/.csv hold "
        "them), or with one configuration (sharded or not) its results table",
    )
    args = parser.parse_args(argv)
    if args.check and args.format != "console":
        print(f"error: --check writes and prints no summary; leave out --format {args.format}", file=sys.stderr)
        return 2
    result = merge_sweep(
        args.sweep_dir,
        write=not args.check,
        baseline=args.baseline or sweep_baseline(args.sweep_dir),
        accept_version_mismatch=args.accept_version_mismatch,
    )
    for note in result.notes:
        print(f"note: {note}")
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for problem in result.problems:
        print(f"error: {problem}", file=sys.stderr)
    if args.check and result.ok:
        print(f"{args.sweep_dir}: {len(result.merged)} combination(s), every shard complete and consistent")
    if not args.check and result.ok:
        _print_tables(result, args.sweep_dir, args.format)
    return 0 if result.ok else 1


def _print_tables(result: MergeResult, sweep_dir: Path, fmt: str) -> None:
    """With --format, the tables on stdout: the sweep summary's for several combinations, else the one run's
    results table (sharded or not), as `lerobot-hydra-compare <dir> --format ...` prints it."""
    if not result.written and len(result.merged) == 1:
        where = result.merged[0][0].shards[0].dir
        note = f"{sweep_dir}: one unsharded run, nothing to merge; its results: {where}"
        print(note, file=sys.stdout if fmt == "console" else sys.stderr)
    if fmt == "console":
        return
    summary_path = sweep_dir / SUMMARY_FILE
    if len(result.merged) == 1:
        tables = [results_table(result.merged[0][1], f"Results of {sweep_dir}")]
    elif summary_path.is_file():
        tables = sweep_tables(json.loads(summary_path.read_text(encoding="utf-8")))
    else:
        return
    print(render_all(tables, fmt), end="", flush=True)


def cli() -> None:
    """The `lerobot-hydra-merge` command: `main`, then an exit that no logger library's exit hook holds
    (loggers/bounded.py); `main` itself returns, for callers in this process."""
    code = main()
    bounded_exit(code)
    sys.exit(code)


if __name__ == "__main__":
    cli()
