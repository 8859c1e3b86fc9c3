"""The decisions of a sequential sweep after a round: each candidate combination paired with its baseline
combination (the same overrides but the baseline's), each task judged on its pairs so far in episode order
(results/sequential.paired); a baseline's task stops once every candidate paired with it stopped there."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.labels import distinguishing_labels, split_label
from lerobot_hydra.core.records import TaskKey
from lerobot_hydra.results.sequential import Decision, TaskStops, paired, pairs_before
from lerobot_hydra.results.table import task_label
from lerobot_hydra.store.shard_file import find_shard_files, load_shard
from lerobot_hydra.sweeps.baseline import holds


@dataclass(frozen=True)
class Settings:
    alpha: float
    beta: float
    detect: float  # fractions
    discordance: float


@dataclass
class PairedDecisions:
    """Each candidate's baseline, and the stops so far of every combination."""

    settings: Settings
    baseline: str
    n_max: int
    pairs: dict[str, str]  # candidate label -> baseline label
    shown: dict[str, str] = field(default_factory=dict)  # label -> what tells it apart (policy=random)
    decided: dict[str, TaskStops] = field(default_factory=dict)
    names: dict[TaskKey, str] = field(default_factory=dict)
    tasks: dict[str, list[TaskKey]] = field(default_factory=dict)  # each combination's, once its shards ran

    def __post_init__(self) -> None:
        labels = sorted(self.labels)
        self.shown = dict(zip(labels, distinguishing_labels(labels), strict=True))
        s = self.settings
        for label in labels:
            shown = {"test": "paired SPRT", "alpha": s.alpha, "beta": s.beta, "detect": s.detect}
            shown |= {"discordance": s.discordance, "baseline": self.shown[self.pairs.get(label, label)]}
            self.decided[label] = TaskStops(shown, self.n_max, "pairs", names=self.names)

    @property
    def labels(self) -> set[str]:
        return set(self.pairs) | set(self.pairs.values())

    @property
    def stops(self) -> dict[str, dict[TaskKey, tuple[int, Decision]]]:
        return {label: decided.stops for label, decided in self.decided.items()}

    def finished(self, label: str) -> bool:
        """Whether every task of `label` stopped (so its jobs have nothing left to run)."""
        return all_stopped(self.tasks, self.stops, label)

    def decide(self, sweep_dir: Path, end: int) -> list[str]:
        """Judges every undecided task of every pair on the episodes before `end`; returns a line per new stop."""
        outcomes = sweep_outcomes(sweep_dir, self.labels, self.names)
        self.tasks = {label: list(by_task) for label, by_task in outcomes.items()}
        said: list[str] = []
        for cand, base in self.pairs.items():
            shown = self.shown[cand]

            def decide(key: TaskKey, cand: str = cand, base: str = base) -> Decision:
                base_of, cand_of = outcomes[base][key], outcomes[cand].get(key, {})
                if any(k not in base_of or k not in cand_of for k in range(end)):
                    raise UserError(
                        f"'{self.shown[cand]}' or its baseline '{self.shown[base]}' lacks episodes of "
                        f"{self.names[key]} before {end} after the round; re-run the sweep with the same "
                        "hydra.sweep.dir (recorded episodes are kept)"
                    )
                pairs, dropped = pairs_before(base_of, cand_of, end)
                if dropped:
                    said.append(
                        f"{self.shown[cand]}: {self.names[key]}: {dropped} pair(s) with an error episode on either "
                        "side left out"
                    )
                s = self.settings
                return paired(pairs, s.alpha, s.beta, s.detect, s.discordance)

            stopped = self.decided[cand]
            stopped.judge_round(outcomes[base], end, decide, lambda line, n=shown: said.append(f"{n}: {line}"))
        self._stop_baselines(outcomes)
        return said

    def _stop_baselines(self, outcomes: dict[str, dict[TaskKey, dict[int, bool | None]]]) -> None:
        """A baseline's task stops once every candidate paired with it stopped there, after the most pairs."""
        for base in set(self.pairs.values()):
            cands = {self.shown[c]: self.decided[c] for c, b in self.pairs.items() if b == base}
            done = self.decided[base].stops
            for key in outcomes[base]:
                if key in done or not all(key in c.stops for c in cands.values()):
                    continue
                n = max(c.stops[key][0] for c in cands.values())
                why = "; ".join(f"{name} {c.stops[key][1].outcome}: {c.stops[key][1].why}" for name, c in cands.items())
                done[key] = (n, Decision(True, "baseline", f"the baseline of {why}"))

    def summary(self, label: str) -> dict[str, Any]:
        """What results.sequential holds for combination `label` (eval_info.json, report.html)."""
        return self.decided[label].summary(self.tasks.get(label, []))


def pair_combinations(labels: Sequence[str], baseline: str) -> dict[str, str]:
    """Each candidate's baseline: the combination holding `baseline` (an override `policy=random` or a value) with
    the candidate's other overrides. Raises UserError when a combination has none."""
    base_labels = [label for label in labels if holds(split_label(label), baseline)]
    if not base_labels or len(base_labels) == len(labels):
        raise UserError(
            f"hydra.sweeper.baseline={baseline} must name a swept value that some combinations hold and others do "
            f"not, e.g. policy=random with -m policy=random,metaworld_expert"
        )
    keys = {o.split("=", 1)[0] for label in base_labels for o in split_label(label) if holds([o], baseline)}

    def others(label: str) -> list[str]:
        return sorted(o for o in split_label(label) if o.split("=", 1)[0] not in keys)

    pairs = {}
    for label in labels:
        if label in base_labels:
            continue
        match = [b for b in base_labels if others(b) == others(label)]
        if len(match) != 1:
            raise UserError(
                f"'{label}' has no baseline combination holding {baseline} with its other overrides; sweep the "
                "baseline over the same values as the candidates"
            )
        pairs[label] = match[0]
    return pairs


def all_stopped(tasks: dict[str, list[TaskKey]], stops: dict[str, dict[TaskKey, Any]], label: str) -> bool:
    """Whether `label`'s shards ran and every one of its tasks has a stop."""
    mine = tasks.get(label)
    return bool(mine) and all(k in stops.get(label, {}) for k in mine)


def sweep_outcomes(
    sweep_dir: Path, labels: set[str], names: dict[TaskKey, str]
) -> dict[str, dict[TaskKey, dict[int, bool | None]]]:
    """label -> task -> episode index -> success (None: an error episode), from every shard file of the sweep;
    fills in the task names."""
    out: dict[str, dict[TaskKey, dict[int, bool | None]]] = {label: {} for label in labels}
    for path in find_shard_files(sweep_dir):
        shard = load_shard(path)
        if shard.label not in out:
            continue
        for key in shard.task_keys:
            out[shard.label].setdefault(tuple(key), {})  # type: ignore[arg-type]
        for r in shard.records:
            out[shard.label].setdefault((r.task_group, r.task_id), {})[r.episode_index] = (
                None if r.errored else r.success
            )
            names[(r.task_group, r.task_id)] = task_label(r.task_group, r.task_id, r.task_name)
    return out
