"""The decisions of a sequential sweep without a baseline (eval.sequential.stop): after a round each combination's
undecided tasks are judged one by one on the episodes 0..end-1 of all its shards, as a single process judges them
(run/sources/rounds.py, with the same `results.sequential.TaskStops`), so both stop at the same episode with the same
summary."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import TaskKey
from lerobot_hydra.launch.round_decisions import all_stopped, sweep_outcomes
from lerobot_hydra.results.sequential import Decision, Outcomes, TaskStops, one_policy_of, successes_before
from lerobot_hydra.schemas.schema import SequentialConfig


@dataclass
class OnePolicyDecisions:
    """Each combination's eval.sequential, and its stops so far."""

    settings: dict[str, SequentialConfig]  # label -> its eval.sequential
    n_max: int
    decided: dict[str, TaskStops] = field(default_factory=dict)
    names: dict[TaskKey, str] = field(default_factory=dict)
    tasks: dict[str, list[TaskKey]] = field(default_factory=dict)  # each combination's, once its shards ran

    def __post_init__(self) -> None:
        for label, seq in self.settings.items():
            self.decided[label] = TaskStops(asdict(seq), self.n_max, names=self.names)

    @property
    def labels(self) -> set[str]:
        return set(self.settings)

    @property
    def stops(self) -> dict[str, dict[TaskKey, tuple[int, Decision]]]:
        return {label: decided.stops for label, decided in self.decided.items()}

    def finished(self, label: str) -> bool:
        """Whether every task of `label` stopped (so its jobs have nothing left to run)."""
        return all_stopped(self.tasks, self.stops, label)

    def decide(self, sweep_dir: Path, end: int) -> list[str]:
        """Judges every undecided task of every combination on its episodes before `end`; a line per new stop."""
        outcomes = sweep_outcomes(sweep_dir, self.labels, self.names)
        self.tasks = {label: list(by_task) for label, by_task in outcomes.items()}
        said: list[str] = []
        for label, by_task in outcomes.items():

            def decide(key: TaskKey, label: str = label, by_task: dict[TaskKey, Outcomes] = by_task) -> Decision:
                if any(k not in by_task[key] for k in range(end)):
                    raise UserError(
                        f"'{label}' lacks episodes of {self.names.get(key, key)} before {end} after the round; re-run "
                        "the sweep with the same hydra.sweep.dir (recorded episodes are kept)"
                    )
                return one_policy_of(self.settings[label], successes_before(by_task[key], end))

            self.decided[label].judge_round(by_task, end, decide, lambda line, n=label: said.append(f"{n}: {line}"))
        return said

    def summary(self, label: str) -> dict[str, Any]:
        """What results.sequential holds for combination `label`, as a single process writes it."""
        return self.decided[label].summary(self.tasks.get(label, []))
