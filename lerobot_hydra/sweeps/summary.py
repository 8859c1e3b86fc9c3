"""The summary of a sweep of several combinations: a row per combination, the seeds of one configuration pooled,
and every configuration compared with a baseline.

Combinations whose configurations differ only in `seed` are one arm: its per-seed rates, their spread and the
pooled rate (`multi_seed`). Every other arm is compared with the baseline arm, paired when their episodes pair up
(`pairing.compare`). The baseline is the sweep's first arm, or the one named by `baseline`: overrides (`policy=a`)
or values (`a`) that exactly one arm's overrides hold. Written to `sweep_summary.json`, printed, and handed to
`publish.publish_sweep` (heatmap, forest plot, report page, the sweep's W&B run).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lerobot_hydra.core.durable import write_json_atomic
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.labels import distinguishing_labels, split_label
from lerobot_hydra.core.layout import HYDRA_DIR, HYDRA_HYDRA_FILE, SUMMARY_FILE
from lerobot_hydra.core.records import EpisodeRecord, sort_records
from lerobot_hydra.results.aggregate import Results, Summary, aggregate
from lerobot_hydra.results.latency_curve import latency_curves
from lerobot_hydra.results.pairing import ResultSet, compare
from lerobot_hydra.rollout.provenance import simulator_text
from lerobot_hydra.store.shard_file import Shard
from lerobot_hydra.sweeps.baseline import SEED_KEY, holds
from lerobot_hydra.sweeps.summary_export import many_section, write_exports
from lerobot_hydra.sweeps.summary_text import format_sweep_summary


@dataclass
class SweepEntry:
    """One merged combination of a sweep."""

    name: str  # the overrides that tell it apart from the others
    label: str  # all its overrides
    num_shards: int
    identity: dict[str, Any]  # its config fingerprint's content (env, policy, n_episodes, seed)
    results: Results  # its merged results
    eval_info: Path
    run_dirs: list[Path]

    @property
    def seed(self) -> Any:
        return self.identity.get(SEED_KEY)

    @property
    def records(self) -> list[EpisodeRecord]:
        return list(self.results.episodes)


class Combination(Protocol):
    """A merge's combination (merge_checks.Combination): the shards of one configuration and split."""

    name: str
    label: str
    num_shards: int
    shards: list[Shard]


@dataclass
class Arm:
    """Combinations of one configuration: one, or several that differ only in seed."""

    name: str
    label: str
    entries: list[SweepEntry]

    @property
    def title(self) -> str:
        return self.name or "(default)"

    @property
    def identity(self) -> dict[str, Any]:
        return self.entries[0].identity

    def result_set(self) -> ResultSet:
        return ResultSet(self.title, [r for e in self.entries for r in e.records])


def group_arms(entries: Sequence[SweepEntry]) -> list[Arm]:
    """Entries whose identities agree but for the seed (and whose seeds differ) form one arm; first-seen order."""
    groups: dict[str, list[SweepEntry]] = {}
    for entry in entries:
        rest = {k: v for k, v in entry.identity.items() if k != SEED_KEY}
        groups.setdefault(json.dumps(rest, sort_keys=True, default=str), []).append(entry)
    members: list[list[SweepEntry]] = []
    for group in groups.values():
        seeds = [e.seed for e in group]
        members.extend([group] if len(set(map(str, seeds))) == len(seeds) else [[e] for e in group])
    labels = [_without_seed(m[0].label) if len(m) > 1 else m[0].label for m in members]
    names = distinguishing_labels(labels) if len(labels) > 1 else [""]
    if len(set(names)) < len(names):
        names = labels
    return [Arm(n, label, m) for n, label, m in zip(names, labels, members, strict=True)]


def _without_seed(label: str) -> str:
    return ",".join(o for o in split_label(label) if o.lstrip("+~").split("=", 1)[0] != SEED_KEY)


def pick_baseline(arms: Sequence[Arm], spec: str | None) -> int:
    """The index of the arm `spec` names (the first without one); UserError when it names none or several."""
    if not spec:
        return 0
    wanted = split_label(spec)
    found = [i for i, arm in enumerate(arms) if all(holds(split_label(arm.label), w) for w in wanted)]
    if len(found) == 1:
        return found[0]
    names = ", ".join(arm.title for arm in arms)
    if not found:
        raise UserError(f"the baseline '{spec}' names none of the sweep's configurations; name one of: {names}")
    several = ", ".join(arms[i].title for i in found)
    raise UserError(f"the baseline '{spec}' matches several configurations ({several}); name one of them fully")


def sweep_entry(combo: Combination, results: Results, eval_info: Path) -> SweepEntry:
    """The summary's view of a merge's combination and its merged `results` (written to `eval_info`)."""
    dirs = [s.dir for s in combo.shards]
    return SweepEntry(combo.name, combo.label, combo.num_shards, combo.shards[0].identity, results, eval_info, dirs)


def baseline_problems(spec: str | None, combos: Sequence[Combination]) -> list[str]:
    """Why `spec` cannot be the baseline of a merge of `combos` (nothing to compare, or it names no single
    configuration): one line, or none."""
    if not spec:
        return []
    arms = group_arms(in_sweep_order([sweep_entry(c, aggregate([], 0.0), Path()) for c in combos]))
    if len(arms) < 2:
        return [f"the baseline '{spec}' has nothing to compare with: the sweep holds one configuration; leave it out"]
    try:
        pick_baseline(arms, spec)
    except UserError as err:
        return [str(err)]
    return []


def sweep_summary(entries: Sequence[SweepEntry], sweep_dir: Path, baseline: str | None) -> dict[str, Any]:
    """sweep_summary.json's content; UserError when `baseline` names no arm."""
    entries = in_sweep_order(entries)
    arms = group_arms(entries)
    arm_of = {id(e): arm.name for arm in arms for e in arm.entries}
    summary: dict[str, Any] = {
        "combinations": [_row(e, arm_of[id(e)], sweep_dir) for e in entries],
        "multi_seed": [multi_seed(arm) for arm in arms if len(arm.entries) > 1],
        "baseline": None,
        "comparisons": [],
    }
    stopped = [{"combination": e.name, **e.results.sequential} for e in entries if e.results.sequential]
    if stopped:  # a sequential sweep (hydra/sweeper=sequential): when and why each combination's tasks stopped
        summary["sequential"] = stopped
    if len(arms) > 1:
        base = arms[pick_baseline(arms, baseline)]
        summary["baseline"] = base.title
        summary["comparisons"] = [_compared(base, a) for a in arms if a is not base]
    if len(arms) > 2:
        summary.update(many_section([a.result_set() for a in arms]))
    curves = latency_curves(arms)
    if curves:  # a sweep over eval.clock.latency_ms (docs/timing.md)
        summary["latency_curves"] = curves
    return summary


def _compared(base: Arm, arm: Arm) -> dict[str, Any]:
    """The paired (or unpaired) comparison of `arm` with `base`, naming each side's simulator where one of them
    ran its simulators in another interpreter (env.python)."""
    comparison = compare(base.result_set(), arm.result_set())
    sides = [simulator_text(a.entries[0].identity) for a in (base, arm)]
    if any(sides):
        comparison["simulators"] = {"baseline": sides[0], "candidate": sides[1]}
    return comparison


def _row(entry: SweepEntry, arm: str, sweep_dir: Path) -> dict[str, Any]:
    overall = entry.results.overall
    path = entry.eval_info
    simulator = simulator_text(entry.identity)
    return {
        **({"simulator": simulator} if simulator else {}),
        "combination": entry.name,
        "label": entry.label,
        "arm": arm,
        "seed": entry.seed,
        "num_shards": entry.num_shards,
        **_rate(overall),
        **({"not_reproducible": why} if (why := entry.results.not_reproducible) else {}),
        "eval_s": entry.results.eval_s,
        "eval_info": str(path.relative_to(sweep_dir)) if path.is_relative_to(sweep_dir) else str(path),
    }


def multi_seed(arm: Arm) -> dict[str, Any]:
    """Per-seed rates, their spread (sample standard deviation across seeds, in points) and the pooled rate with
    its interval (every episode of every seed), overall and per task."""
    entries = sorted(arm.entries, key=lambda e: str(e.seed))
    records = [r for e in entries for r in e.records]
    order = list(dict.fromkeys((r.task_group, r.task_id) for r in records))
    pooled = aggregate(sort_records(records, order), sum(e.results.eval_s for e in entries))
    per_task = []
    for task in pooled.tasks:
        rates = [t.pc_success for e in entries if (t := e.results.task(task.key)) is not None]
        per_task.append(
            {
                "task_group": task.task_group,
                "task_id": task.task_id,
                "task_name": task.task_name,
                "per_seed_pc_success": rates,
                "std_pc_success": statistics.stdev(rates) if len(rates) > 1 else None,
                **_rate(task),
            }
        )
    per_seed = [_seed_row(e) for e in entries]
    return {
        "arm": arm.name,
        "seeds": [e.seed for e in entries],
        "per_seed": per_seed,
        "std_pc_success": statistics.stdev(s["pc_success"] for s in per_seed),
        "pooled": _rate(pooled.overall),
        "per_task": per_task,
    }


def _rate(summary: Summary) -> dict[str, Any]:
    """A summary's episodes, success rate and interval, and its error episodes, as sweep_summary.json's rows hold
    them."""
    return {
        "n_episodes": summary.n_episodes,
        "n_errors": summary.n_errors,
        "pc_success": summary.pc_success,
        "ci95_pc_success": list(summary.ci95_pc_success),
    }


def _seed_row(entry: SweepEntry) -> dict[str, Any]:
    return {"seed": entry.seed, "combination": entry.name, **_rate(entry.results.overall)}


def in_sweep_order(entries: Sequence[SweepEntry]) -> list[SweepEntry]:
    """By Hydra's job number of each combination's first job, so that rows (and the default baseline) follow the
    order of the sweep's values; combinations run by hand come after, in the order given."""
    return sorted(entries, key=lambda e: _job_order(e.run_dirs))


def _job_order(run_dirs: Sequence[Path]) -> tuple[int, int]:
    import yaml

    nums = []
    for run_dir in run_dirs:
        try:
            saved = yaml.safe_load((run_dir / HYDRA_DIR / HYDRA_HYDRA_FILE).read_text())
            nums.append(int(saved["hydra"]["job"]["num"]))
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
            continue
    return (0, min(nums)) if nums else (1, 0)


def publish_summary(
    entries: Sequence[SweepEntry], sweep_dir: Path, baseline: str | None, config: Mapping[str, Any] | None
) -> list[str]:
    """Write, print and publish the summary of a sweep's merged combinations; returns problems (a baseline that
    names no configuration), in which case nothing of the summary is written."""
    from lerobot_hydra.publish.publish import publish_sweep

    entries = in_sweep_order(entries)
    try:
        summary = sweep_summary(entries, sweep_dir, baseline)
    except UserError as err:
        return [str(err)]
    path = sweep_dir / SUMMARY_FILE
    write_json_atomic(path, summary)
    write_exports(summary, sweep_dir)
    print(format_sweep_summary(summary, f"Sweep summary ({path})"), flush=True)
    publish_sweep([(e.name or "default", e.results) for e in entries], sweep_dir, summary, config)
    return []
