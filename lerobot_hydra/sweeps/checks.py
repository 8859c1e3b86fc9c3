"""Whether a sweep's shards can be merged: combinations of shards, the checks each must pass, and the commands
that run or resume a shard where the merge will find it. Every problem is one line that says how to fix it.
"""

from __future__ import annotations

import os
import shlex
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lerobot_hydra.core.commands import hydra_override, shell_command
from lerobot_hydra.core.labels import is_shard_override, job_subdir
from lerobot_hydra.core.layout import EPISODES_FILE, shard_dir_name
from lerobot_hydra.core.records import EpisodeKey, TaskKey, read_jsonl
from lerobot_hydra.rollout.plan import plan_size, shard_plan
from lerobot_hydra.store.run_store import diff_keys
from lerobot_hydra.store.shard_file import Shard, fingerprint, saved_overrides

# Hydra overrides that a re-run command must not copy: the sweep/run location is given explicitly.
_LOCATION_OVERRIDES = ("hydra.sweep.dir=", "hydra.run.dir=", "hydra.sweep.subdir=", "hydra.mode=")


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
    def dynamic(self) -> bool:
        """Its shards claimed their work from a queue (`eval.claims=dynamic`): no shard has a fixed part."""
        return self.shards[0].identity.get("claims") == "dynamic"

    @property
    def title(self) -> str:
        name = self.name or self.label
        return f"'{name}'" if name else "the sweep"


def group_combinations(shards: list[Shard]) -> list[Combination]:
    groups: dict[TaskKey, list[Shard]] = {}
    for shard in shards:
        groups.setdefault((shard.fingerprint, shard.num_shards), []).append(shard)
    return [
        Combination(fp, n, sorted(group, key=lambda s: (s.shard_id, str(s.path)))) for (fp, n), group in groups.items()
    ]


def missing_shards(combo: Combination, sweep_dir: Path) -> list[str]:
    """A line for each shard id of 0..N-1 that has no shard file, with the command that runs it (none for a dynamic
    combination: the shards that ran may have done all the work; `check_combination` counts its episodes)."""
    if combo.dynamic:
        return []
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
    seen: dict[EpisodeKey, Shard] = {}
    for shard in combo.shards:
        problems.extend(_check_shard(shard, reference, combo, sweep_dir))
        for record in shard.records:
            first = seen.setdefault(record.unit, shard)
            if first is not shard:
                problems.append(
                    f"{combo.title}: episode {_unit(record.unit)} appears in {first.name} ({first.path}) and in "
                    f"{shard.name} ({shard.path}); re-run one of them in a new dir"
                )
    if combo.dynamic and not problems:
        problems.extend(_check_coverage(combo, set(seen), sweep_dir))
    return problems


def _check_coverage(combo: Combination, recorded: set[EpisodeKey], sweep_dir: Path) -> list[str]:
    """A dynamic combination merges once its shards together recorded every episode of the run."""
    reference = combo.shards[0]
    n_episodes = int(reference.identity.get("n_episodes", 0))
    # A sequential sweep's tasks end at their stops (every shard file of the combination holds the same ones).
    expected = sum(min(n_episodes, reference.stopped.get(key, n_episodes)) for key in reference.task_keys)
    if len(recorded) == expected:
        return []
    present = {s.shard_id for s in combo.shards}
    shard_id = min(set(range(combo.num_shards)) - present, default=reference.shard_id)
    return [
        f"{combo.title}: its shards recorded {len(recorded)} of {expected} episodes (claimed dynamically); rerun "
        f"any of its shards, which takes what is left: {rerun_command(combo, shard_id, sweep_dir)}"
    ]


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
    if combo.dynamic:
        return _recorded_twice(shard)
    expected = shard_plan(shard.task_keys, int(shard.identity.get("n_episodes", 0)), shard.shard_id, shard.num_shards)
    if shard.plan != expected:
        return [f"{shard.path}: its planned episodes are not {shard.name} of its configuration; re-run that shard"]
    blocks = shard.planned_blocks()
    planned_count = sum(len(episodes) for episodes in blocks.values())
    units = [r.unit for r in shard.records]
    twice = _recorded_twice(shard)
    if twice:
        return twice
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


def _recorded_twice(shard: Shard) -> list[str]:
    counts = Counter(r.unit for r in shard.records)
    twice = sorted(u for u, n in counts.items() if n > 1)
    if twice:
        return [f"{shard.path}: episode {_unit(twice[0])} is recorded {counts[twice[0]]} times; re-run that shard"]
    return []


def unplanned_records(combo: Combination) -> list[str]:
    """A warning for each shard whose episodes.jsonl holds records of episodes it did not plan (lines copied or
    concatenated by hand): its shard file holds the planned ones only, so the merge leaves those out."""
    if combo.dynamic:
        return []  # a shard claiming dynamically records whatever it claims
    warnings = []
    for shard in combo.shards:
        blocks = {b.key: b.episodes for b in shard.plan}
        path = shard.dir / EPISODES_FILE
        extra = sorted({r.unit for r in read_jsonl(path) if r.unit[2] not in blocks.get(r.unit[:2], ())})
        if extra:
            group, task_id, index = extra[0]
            more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
            warnings.append(
                f"{path} holds a record of episode {index} of task {group}/{task_id}{more}, outside the plan of "
                f"{shard.name} (copied or concatenated by hand?); left out of the merge"
            )
    return warnings


def _unit(unit: EpisodeKey) -> str:
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
