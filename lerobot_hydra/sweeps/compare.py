"""`lerobot-hydra-compare A B` (or `python -m lerobot_hydra.sweeps.compare A B`): compare the results in B with
those in A (the baseline), per task and overall, paired episode for episode when both ran the same tasks, episodes,
seeds and initial states, else unpaired (and it says why).

A and B are run dirs (a run, a shard sweep's merged dir, a combination's dir), sweep dirs whose combinations
differ only in seed (pooled), or lerobot-eval output dirs (or their eval_info.json): lerobot-eval's episodes pair by
task, episode and seed where its eval_info.json records seeds, and are compared unpaired where it does not (the
heading says which). With `--paired`, results that cannot be paired are refused, naming the difference.

Every row gets a verdict (regressed, improved, held, underpowered: results.verdicts) and the smallest difference its
episodes could detect. Exit status: 0 compared; 1 with `--fail-on-regression [overall|group|task]` when a row of
that level regressed significantly (CI gating); 2 a dir that holds no usable results or, with --paired, results
that cannot be paired.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lerobot_hydra.core.durable import write_json_atomic
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.layout import EPISODES_FILE, EVAL_INFO_FILE
from lerobot_hydra.core.records import read_jsonl, sort_records
from lerobot_hydra.results.aggregate import aggregate
from lerobot_hydra.results.eval_info import lerobot_eval_records, read_eval_info
from lerobot_hydra.results.export import FORMATS, console, render, render_all
from lerobot_hydra.results.export_tables import comparison_table, many_table, pairs_table, results_table
from lerobot_hydra.results.many import many_policies
from lerobot_hydra.results.pairing import ResultSet, compare
from lerobot_hydra.results.pairing_text import format_comparison
from lerobot_hydra.results.verdicts import DEFAULT, REGRESSED, Criteria


def load_results(path: Path, name: str) -> ResultSet:
    """The episodes under `path`: from its shard files (merged and checked as lerobot-hydra-merge does; several
    seeds of one configuration pooled), else its eval_info.json's episodes, else its episodes.jsonl."""
    from lerobot_hydra.store.shard_file import find_shard_files
    from lerobot_hydra.sweeps.shards import merge_sweep
    from lerobot_hydra.sweeps.summary import group_arms, sweep_entry

    if path.is_file() and path.name.endswith(".json"):
        return _eval_info_results(path, name)
    if not path.is_dir():
        raise UserError(f"{path} is not a directory; give a run dir, a sweep dir or an eval_info.json")
    if find_shard_files(path):
        result = merge_sweep(path, write=False)
        if not result.ok:
            raise UserError(f"{path} cannot be read as one result: {result.problems[0]}")
        entries = [sweep_entry(c, results, path) for c, results in result.merged]
        arms = group_arms(entries)
        if len(arms) > 1:
            raise UserError(
                f"{path} holds {len(arms)} configurations ({', '.join(a.title for a in arms)}); give the dir of one "
                "of them, or compare them all with the baseline: lerobot-hydra-merge --baseline <one of them> "
                f"{path}"
            )
        return ResultSet(name, arms[0].result_set().records)
    info_path = path / EVAL_INFO_FILE
    if info_path.is_file():
        return _eval_info_results(info_path, name)
    records = read_jsonl(path / EPISODES_FILE)
    if not records:
        raise UserError(f"{path} holds no results (no shard file, {EVAL_INFO_FILE} or {EPISODES_FILE})")
    return ResultSet(name, records)


def _eval_info_results(path: Path, name: str) -> ResultSet:
    """An eval_info.json's episodes: its episode records (ours), else its per-task lists (lerobot-eval's)."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        if "episodes" in info:
            return ResultSet(name, list(read_eval_info(path).episodes))
        records, seeded = lerobot_eval_records(info)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(f"{path} has no readable episode records ({err}); re-run or merge it") from err
    if not records:
        raise UserError(f"{path} holds no episodes")
    why = None if seeded else "is lerobot-eval's eval_info.json, which records no episode seeds"
    return ResultSet(name, records, unpairable=why, init_states_known=False)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lerobot-hydra-compare",
        description="Compare the success of B with A (the baseline): per task and overall, both rates, their "
        "difference with a 95%% interval and a p-value; paired when both ran the same episodes. Three or more dirs: "
        "which of them differ (every pair tested, Holm-adjusted, letters); one dir: its results table.",
    )
    parser.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="A (the baseline), B, ...: run or sweep dirs")
    parser.add_argument(
        "--paired", action="store_true", help="refuse, naming the difference, unless the episodes pair up"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the comparison to FILE as JSON")
    parser.add_argument("--format", choices=FORMATS, default="console", help="print the table as this (console)")
    parser.add_argument(
        "--mid-p",
        action="store_true",
        help="paired episodes: the mid-p McNemar test, less conservative than the exact one (its size is close to "
        "alpha on average, but not guaranteed below it)",
    )
    parser.add_argument(
        "--fail-on-regression",
        nargs="?",
        const="overall",
        choices=GATE_LEVELS,
        help="exit 1 when B regressed significantly: overall (the default), in any group, or in any task "
        "(Holm-adjusted across the groups or tasks)",
    )
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the verdicts (0.05)")
    parser.add_argument(
        "--margin",
        type=float,
        metavar="POINTS",
        help="'held' needs the episodes to detect a change of this many points (10); else 'underpowered'",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.json is not None:
            check_json_target(args.json)
        margin = 10.0 if args.margin is None else args.margin
        if not (0 < args.alpha < 1 and 0 < margin <= 100):
            raise UserError(f"--alpha {args.alpha:g} / --margin {margin:g}: give 0 < alpha < 1, 0 < margin <= 100")
        _check_dir_count(args)
        if len(args.dirs) != 2:
            return _one_or_many(args)
        a, b = args.dirs
        comparison = compare_dirs(a, b, args.paired, Criteria(args.alpha, margin), args.mid_p)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    title = f"B ({b}) vs baseline A ({a})"
    if args.format == "console":
        print(format_comparison(comparison, title), flush=True)
    else:
        print(render(comparison_table(comparison, title), args.format), end="", flush=True)
    if args.json is not None:
        write_json_atomic(args.json, comparison)
    if args.fail_on_regression and regressed(comparison, args.fail_on_regression):
        print(f"regression: B regressed significantly ({args.fail_on_regression} level)", file=sys.stderr)
        return 1
    return 0


def _check_dir_count(args: argparse.Namespace) -> None:
    """Refuses the options that need two dirs (B judged against A) with any other number of them."""
    given = [f for f, on in (("--fail-on-regression", args.fail_on_regression), ("--margin", args.margin)) if on]
    if len(args.dirs) == 1:
        given += [f for f, on in (("--paired", args.paired), ("--mid-p", args.mid_p)) if on]
    if len(args.dirs) != 2 and given:
        raise UserError(f"{given[0]} needs two dirs (B judged against A), not {len(args.dirs)}; leave it out")


def _one_or_many(args: argparse.Namespace) -> int:
    """One dir: its results table; three or more: the many-policy table and its pairwise tests (results.many)."""
    names = [str(d) for d in args.dirs]
    short = [d.name for d in args.dirs]
    names = short if len(set(short)) == len(short) else names
    sets = [load_results(d, n) for d, n in zip(args.dirs, names, strict=True)]
    if len(sets) == 1:
        records = sets[0].records
        order = list(dict.fromkeys((r.task_group, r.task_id) for r in records))
        tables = [results_table(aggregate(sort_records(records, order), 0.0), f"Results of {args.dirs[0]}")]
        data: dict[str, Any] = {"records": [r.to_dict() for r in records]}
    else:
        data = many_policies(sets, args.alpha, args.mid_p)
        tables = [many_table(data, "Success by policy"), pairs_table(data, "Pairwise tests")]
    if args.json is not None:
        write_json_atomic(args.json, data)
    print(render_all(tables, args.format) if args.format != "console" else "\n".join(map(console, tables)), end="")
    return 0


GATE_LEVELS = ("overall", "group", "task")


def regressed(comparison: dict[str, Any], level: str) -> bool:
    """Whether a row of `level` (overall, group or task) has the verdict 'regressed'."""
    rows = {
        "overall": [comparison["overall"]],
        "group": list(comparison["per_group"].values()),
        "task": comparison["per_task"],
    }[level]
    return any(row["verdict"] == REGRESSED for row in rows)


def check_json_target(path: Path) -> None:
    """Refuses, before anything is compared, a --json FILE that could not be written."""
    if path.is_dir():
        raise UserError(f"--json {path} is a directory; name a file, e.g. --json {path / 'comparison.json'}")
    if not path.parent.is_dir():
        raise UserError(f"--json {path}: the folder {path.parent} does not exist; create it or name another file")


def compare_dirs(
    a: Path, b: Path, require_paired: bool = False, criteria: Criteria = DEFAULT, mid_p: bool = False
) -> dict[str, Any]:
    return compare(load_results(a, "A"), load_results(b, "B"), require_paired, criteria, mid_p)


if __name__ == "__main__":
    sys.exit(main())
