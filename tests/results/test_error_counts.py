"""Error episodes in the results: counted as `n_errors` per task, group and overall, left out of the episodes, rates
and intervals, of paired comparisons (a pair with an error on either side is dropped and counted) and of the
outcomes sequential stopping judges; a rerun's record of an error episode replaces it."""

from __future__ import annotations

import dataclasses

import pytest

from lerobot_hydra.core.records import EpisodeRecord, latest_by_unit
from lerobot_hydra.results.aggregate import aggregate
from lerobot_hydra.results.eval_info import from_eval_info, to_eval_info
from lerobot_hydra.results.pairing import ResultSet, compare
from lerobot_hydra.results.pairing_text import describe
from lerobot_hydra.results.sequential import pairs_before, successes_before
from lerobot_hydra.results.table import format_table
from lerobot_hydra.run.sink import MemorySink
from lerobot_hydra.run.work import outcomes_of


def record(task_id: int, k: int, success: bool, error: str | None = None) -> EpisodeRecord:
    r = EpisodeRecord("g", task_id, f"t{task_id}", "desc", k, 1000 + k, success, float(success), float(success), 5, 0.1)
    return dataclasses.replace(r, error=error, error_step=None if error is None else 3)


def test_error_episodes_are_counted_apart_at_every_level_and_left_out_of_the_rates() -> None:
    records = [
        record(0, 0, True),
        record(0, 1, False, "FloatingPointError: unstable"),
        record(0, 2, False),
        record(1, 0, False, "RuntimeError: lost GL context"),
        record(1, 1, False, "RuntimeError: lost GL context"),
    ]
    results = aggregate(records, 1.0)
    t0, t1 = results.tasks
    assert (t0.n_episodes, t0.successes, t0.pc_success, t0.n_errors, len(t0.records)) == (2, 1, 50.0, 1, 2)
    assert (t1.n_episodes, t1.pc_success, t1.n_errors, t1.records) == (0, None, 2, ())
    assert (results.overall.n_episodes, results.overall.n_errors, results.overall.pc_success) == (2, 3, 50.0)
    assert results.groups[0].n_errors == 3 and len(results.episodes) == 5
    info = to_eval_info(results)
    assert [t["n_errors"] for t in info["per_task"]] == [1, 2]
    assert info["per_group"]["g"]["n_errors"] == 3 and info["overall"]["n_errors"] == 3
    assert info["per_task"][0]["metrics"]["successes"] == [True, False], "error episodes have no metrics"
    assert from_eval_info(info).overall == results.overall, "the records keep the errors through a round trip"
    lines = format_table(results).splitlines()
    assert lines[0].split()[-1] == "errors" and lines[-2].split()[-1] == "3", lines
    assert lines[-1].startswith("3 error episode(s)")
    assert "errors" not in format_table(aggregate([record(0, 0, True)], 1.0)), "no column without errors"


def test_a_paired_comparison_drops_and_counts_the_pairs_with_an_error_on_either_side() -> None:
    base = ResultSet("a", [record(0, 0, True), record(0, 1, True, "E: x"), record(0, 2, False), record(0, 3, True)])
    cand = ResultSet("b", [record(0, 0, False), record(0, 1, False), record(0, 2, True, "E: y"), record(0, 3, True)])
    comparison = compare(base, cand)
    assert comparison["paired"] and comparison["error_pairs_dropped"] == 2
    assert (comparison["overall"]["n_baseline"], comparison["overall"]["pc_baseline"]) == (2, 100.0)
    assert "2 pair(s) with an error episode on either side left out" in describe(comparison)
    other = ResultSet("c", [dataclasses.replace(r, seed=r.seed + 7) for r in cand.records])
    unpaired = compare(base, other)
    assert not unpaired["paired"] and unpaired["error_episodes_left_out"] == [1, 1]
    assert unpaired["overall"]["n_baseline"] == 3 and "error episodes left out" in describe(unpaired)


def test_sequential_stopping_judges_only_evaluated_episodes() -> None:
    base, cand = (MemorySink([("g", 0)], [], None) for _ in range(2))
    for k, (a, b) in enumerate([(True, None), (False, True), (None, None), (True, False)]):
        base.add(record(0, k, bool(a), None if a is not None else "E: x"))
        cand.add(record(0, k, bool(b), None if b is not None else "E: y"))
    assert successes_before(outcomes_of(base, ("g", 0)), 4) == [True, False, True]
    assert pairs_before(outcomes_of(base, ("g", 0)), outcomes_of(cand, ("g", 0)), 4) == (
        [(False, True), (True, False)],
        2,
    )


def test_an_error_episode_is_not_done_and_its_reruns_record_replaces_it() -> None:
    sink = MemorySink([("g", 0)], [], None)
    sink.add(record(0, 0, False, "E: x"))
    assert sink.done() == set() and sink.recorded_per_task()[0][("g", 0)] == 0
    assert sink.add(record(0, 0, True)) and sink.done() == {("g", 0, 0)}
    assert not sink.add(record(0, 0, False, "E: x")), "an evaluated episode is never replaced by an error"
    kept = latest_by_unit([record(0, 0, False, "E: x"), record(0, 0, True), record(0, 0, False, "E: z")])
    assert list(kept.values()) == [record(0, 0, True)]


@pytest.mark.parametrize("error", [None, "E: x"])
def test_old_records_without_the_error_fields_load(error: str | None) -> None:
    data = record(0, 0, True, error).to_dict()
    old = {k: v for k, v in data.items() if k not in ("error", "error_step")}
    assert EpisodeRecord.from_dict(old) == record(0, 0, True)
    assert EpisodeRecord.from_dict(data).errored == (error is not None)
