"""`lerobot-hydra-compare A B` (or `python -m lerobot_hydra.merge.compare A B`): compare the results in B with
those in A (the baseline), per task and overall, paired episode for episode when both ran the same tasks, episodes,
seeds and initial states, else unpaired (and it says why).

A and B are run dirs (a run, a shard sweep's merged dir, a combination's dir) or sweep dirs whose combinations
differ only in seed (pooled). With `--paired`, results that cannot be paired are refused, naming the difference.
Exit status: 0 compared, 2 a dir that holds no usable results or, with --paired, results that cannot be paired.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lerobot_hydra.core.durable import write_json_atomic
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.layout import EPISODES_FILE, EVAL_INFO_FILE
from lerobot_hydra.core.records import read_jsonl
from lerobot_hydra.results.eval_info import read_eval_info
from lerobot_hydra.results.pairing import ResultSet, compare, format_comparison


def load_results(path: Path, name: str) -> ResultSet:
    """The episodes under `path`: from its shard files (merged and checked as lerobot-hydra-merge does; several
    seeds of one configuration pooled), else its eval_info.json's episodes, else its episodes.jsonl."""
    from lerobot_hydra.merge.shards import merge_sweep
    from lerobot_hydra.merge.summary import group_arms, sweep_entry
    from lerobot_hydra.rundir.shard_file import find_shard_files

    if not path.is_dir():
        raise UserError(f"{path} is not a directory; give a run dir or a sweep dir")
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
        try:
            return ResultSet(name, list(read_eval_info(info_path).episodes))
        except ValueError as err:
            raise UserError(f"{info_path} has no readable episode records ({err}); re-run or merge it") from err
    records = read_jsonl(path / EPISODES_FILE)
    if not records:
        raise UserError(f"{path} holds no results (no shard file, {EVAL_INFO_FILE} or {EPISODES_FILE})")
    return ResultSet(name, records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lerobot-hydra-compare",
        description="Compare the success of B with A (the baseline): per task and overall, both rates, their "
        "difference with a 95%% interval and a p-value; paired when both ran the same episodes.",
    )
    parser.add_argument("a", type=Path, help="the baseline: a run dir or a sweep dir")
    parser.add_argument("b", type=Path, help="the candidate: a run dir or a sweep dir")
    parser.add_argument(
        "--paired", action="store_true", help="refuse, naming the difference, unless the episodes pair up"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the comparison to FILE as JSON")
    args = parser.parse_args(argv)
    try:
        if args.json is not None:
            check_json_target(args.json)
        comparison = compare_dirs(args.a, args.b, require_paired=args.paired)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_comparison(comparison, f"B ({args.b}) vs baseline A ({args.a})"), flush=True)
    if args.json is not None:
        write_json_atomic(args.json, comparison)
    return 0


def check_json_target(path: Path) -> None:
    """Refuses, before anything is compared, a --json FILE that could not be written."""
    if path.is_dir():
        raise UserError(f"--json {path} is a directory; name a file, e.g. --json {path / 'comparison.json'}")
    if not path.parent.is_dir():
        raise UserError(f"--json {path}: the folder {path.parent} does not exist; create it or name another file")


def compare_dirs(a: Path, b: Path, require_paired: bool = False) -> dict[str, Any]:
    return compare(load_results(a, "A"), load_results(b, "B"), require_paired=require_paired)


if __name__ == "__main__":
    sys.exit(main())
