"""Compare two sets of episode records, a baseline and a candidate: per task and overall, both success rates and
the difference (candidate - baseline) with its 95% interval and a p-value.

Episode k of a task has the same seed and initial state whatever the policy, checkpoint or env perturbation, so
two result sets over the same tasks, episodes, seeds and initial states pair up episode for episode (by task,
episode index and seed), and the comparison is paired (exact McNemar test, Newcombe's paired interval). Otherwise
it is unpaired (Fisher's exact test, Newcombe's independent interval), and says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import EpisodeRecord, TaskKey
from lerobot_hydra.results.power import detectable_paired, detectable_unpaired
from lerobot_hydra.results.stats import (
    FISHER,
    MCNEMAR,
    MCNEMAR_MID_P,
    Difference,
    PairCounts,
    paired_difference,
    unpaired_difference,
)
from lerobot_hydra.results.steps import paired_steps, steps_summary
from lerobot_hydra.results.table import task_label as table_label
from lerobot_hydra.results.verdicts import DEFAULT, Criteria, holm, verdict

PairKey = tuple[str, int, int, int]  # task group, task id, episode index, seed
PAIRED_ON_STATES, PAIRED_ON_SEEDS = "task, episode, seed and initial state", "task, episode and seed"


@dataclass(frozen=True)
class ResultSet:
    """The episodes of one configuration: a run, a merged sweep combination, or several seeds of one."""

    name: str
    records: list[EpisodeRecord]
    # Why its episodes cannot be paired at all (e.g. lerobot-eval's eval_info.json records no seeds); None if they can.
    unpairable: str | None = None
    # False where the episodes' initial states are not recorded (lerobot-eval's): pairs are matched by task and seed.
    init_states_known: bool = True

    @property
    def tasks(self) -> list[TaskKey]:
        return list(dict.fromkeys((r.task_group, r.task_id) for r in self.records))

    def of_task(self, task: TaskKey) -> list[EpisodeRecord]:
        return [r for r in self.records if (r.task_group, r.task_id) == task]


def pair_key(record: EpisodeRecord) -> PairKey:
    return (record.task_group, record.task_id, record.episode_index, record.seed)


def task_label(record: EpisodeRecord) -> str:
    """As the results table names a task: its group alone when the task is its own group (a MetaWorld task asked
    for by name), else group/id name."""
    return table_label(record.task_group, record.task_id, record.task_name)


def row_label(row: dict[str, Any]) -> str:
    """A comparison row's task as task_label names it, or 'overall'."""
    return table_label(row["task_group"], row["task_id"], row["task_name"]) if "task_group" in row else "overall"


def pairing_problem(a: ResultSet, b: ResultSet) -> str | None:
    """None when `a` and `b` hold the same episodes (tasks, episode indices, seeds, initial states); else what
    differs, as a phrase naming the first difference."""
    for s in (a, b):
        if s.unpairable:
            return f"{s.name} {s.unpairable}"
    names: dict[TaskKey, str] = {(r.task_group, r.task_id): task_label(r) for r in [*b.records, *a.records]}
    only_a = [t for t in a.tasks if t not in set(b.tasks)]
    only_b = [t for t in b.tasks if t not in set(a.tasks)]
    if only_a or only_b:
        parts = [f"{_some(names[t] for t in ts)} only in {s.name}" for ts, s in ((only_a, a), (only_b, b)) if ts]
        return f"different tasks ({'; '.join(parts)})"
    for s in (a, b):
        keys = [pair_key(r) for r in s.records]
        if len(set(keys)) < len(keys):
            return f"{s.name} records some episode twice"
    for task in a.tasks:
        ra, rb = a.of_task(task), b.of_task(task)
        if len(ra) != len(rb):
            return f"different episode counts ({names[task]}: {len(ra)} in {a.name}, {len(rb)} in {b.name})"
        seeds_a, seeds_b = sorted(r.seed for r in ra), sorted(r.seed for r in rb)
        if seeds_a != seeds_b or {pair_key(r) for r in ra} != {pair_key(r) for r in rb}:
            return f"different seeds ({names[task]}: {_seeds(seeds_a)} in {a.name}, {_seeds(seeds_b)} in {b.name})"
        if not (a.init_states_known and b.init_states_known):
            continue
        by_key = {pair_key(r): r for r in rb}
        for r in ra:
            other = by_key[pair_key(r)].init_state_id
            if r.init_state_id != other:
                return (
                    f"different initial states ({names[task]} episode {r.episode_index}: "
                    f"{r.init_state_id} in {a.name}, {other} in {b.name})"
                )
    return None


def compare(
    baseline: ResultSet,
    candidate: ResultSet,
    require_paired: bool = False,
    criteria: Criteria = DEFAULT,
    mid_p: bool = False,
) -> dict[str, Any]:
    """The comparison of `candidate` against `baseline`, paired when their episodes pair up, with a verdict per
    task, group and overall (results.verdicts, at `criteria`). With `require_paired`, result sets that do not pair
    are refused (UserError naming the difference). `mid_p`: paired rows use the mid-p McNemar test."""
    reason = pairing_problem(baseline, candidate)
    if reason is not None and require_paired:
        raise UserError(
            f"{baseline.name} and {candidate.name} cannot be paired: {reason}; "
            "run both with the same tasks, eval.n_episodes and seed, or compare them unpaired (without --paired)"
        )
    paired = reason is None
    baseline, candidate, left_out = without_errors(baseline, candidate, paired)
    for side in (baseline, candidate):
        if not side.records:
            raise UserError(f"{side.name} holds no episodes to compare")
    rows = []
    for task in baseline.tasks:
        if task in set(candidate.tasks):
            records = baseline.of_task(task)
            named = {"task_group": task[0], "task_id": task[1], "task_name": records[0].task_name}
            rows.append({**named, **_row(records, candidate.of_task(task), paired, mid_p)})
    groups = {}
    for group in dict.fromkeys(r.task_group for r in baseline.records):
        base = [r for r in baseline.records if r.task_group == group]
        cand = [r for r in candidate.records if r.task_group == group]
        if cand:
            groups[group] = _row(base, cand, paired, mid_p)
    known = baseline.init_states_known and candidate.init_states_known
    overall = _row(baseline.records, candidate.records, paired, mid_p)
    for level in (rows, list(groups.values()), [overall]):
        _judge(level, criteria)
    return {
        "baseline": baseline.name,
        "candidate": candidate.name,
        "steps": _steps(baseline, candidate) if paired else None,
        "paired": paired,
        "paired_on": (PAIRED_ON_STATES if known else PAIRED_ON_SEEDS) if paired else None,
        "unpaired_reason": reason,
        "test": (MCNEMAR_MID_P if mid_p else MCNEMAR) if paired else FISHER,
        "per_task": rows,
        "per_group": groups,
        "overall": overall,
        "verdict": overall["verdict"],
        "criteria": {"alpha": criteria.alpha, "margin_pc": criteria.margin_pc},
        **left_out,
    }


def _steps(baseline: ResultSet, candidate: ResultSet) -> dict[str, Any]:
    """Steps to success of each side, and their paired test on the episodes both solve (results.steps)."""
    by_key = {pair_key(r): r for r in candidate.records}
    pairs = [(r, by_key[pair_key(r)]) for r in baseline.records]
    sides = {"baseline": steps_summary(baseline.records), "candidate": steps_summary(candidate.records)}
    return {**sides, **paired_steps(pairs)}


def without_errors(a: ResultSet, b: ResultSet, paired: bool) -> tuple[ResultSet, ResultSet, dict[str, Any]]:
    """Both sides without their error episodes (core/records.py `error`), and what was left out: paired, every
    pair with an error episode on either side (`error_pairs_dropped`); else each side's error episodes
    (`error_episodes_left_out`: baseline, candidate)."""
    errored = {pair_key(r) for r in [*a.records, *b.records] if r.errored}
    if not errored:
        return a, b, {}

    def kept(r: EpisodeRecord) -> bool:
        return pair_key(r) not in errored if paired else not r.errored

    sides = [dataclasses.replace(s, records=[r for r in s.records if kept(r)]) for s in (a, b)]
    if paired:
        return sides[0], sides[1], {"error_pairs_dropped": len(errored)}
    return sides[0], sides[1], {"error_episodes_left_out": [sum(r.errored for r in s.records) for s in (a, b)]}


def _judge(rows: list[dict[str, Any]], criteria: Criteria) -> None:
    """Each row's verdict, its p-value adjusted (Holm) for the other rows of its level."""
    for row, p in zip(rows, holm([r["p_value"] for r in rows]), strict=True):
        row["p_adjusted"] = p
        row["verdict"] = verdict(row["diff_pc"], p, row["mde_pc"], criteria)


def _row(base: Sequence[EpisodeRecord], cand: Sequence[EpisodeRecord], paired: bool, mid_p: bool) -> dict[str, Any]:
    row: dict[str, Any] = {"n_baseline": len(base), "n_candidate": len(cand)}
    if paired:
        by_key = {pair_key(r): r.success for r in cand}
        counts = PairCounts.of([(r.success, by_key[pair_key(r)]) for r in base])
        diff = paired_difference(counts, mid_p)
        row.update(n_baseline_only=counts.baseline_only, n_candidate_only=counts.candidate_only)
        mde = detectable_paired(counts.n, (counts.baseline_only + counts.candidate_only) / counts.n)
    else:
        diff = unpaired_difference(sum(r.success for r in base), len(base), sum(r.success for r in cand), len(cand))
        mde = detectable_unpaired(diff.baseline, len(base), len(cand))
    return {**row, **_percentages(diff), "mde_pc": None if mde is None else 100.0 * mde}


def _percentages(diff: Difference) -> dict[str, Any]:
    return {
        "pc_baseline": 100.0 * diff.baseline,
        "pc_candidate": 100.0 * diff.candidate,
        "diff_pc": 100.0 * diff.estimate,
        "ci95_diff_pc": [100.0 * diff.low, 100.0 * diff.high],
        "p_value": diff.p_value,
    }


def _some(items: Iterable[str], limit: int = 3) -> str:
    items = list(items)
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _seeds(seeds: list[int]) -> str:
    if seeds and seeds == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 2:
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seeds " + _some(map(str, seeds), 4)
