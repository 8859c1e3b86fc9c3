"""`hydra/sweeper=sequential`: a paired sequential comparison, or one policy's sequential stopping
(eval.sequential.stop, no hydra.sweeper.baseline) over shards, driven by the sweep itself, with any launcher.

    python eval.py -m policy=random,metaworld_expert "env.task=[reach-v3,push-v3]" eval.n_episodes=60 \\
        eval.sequential.round=10 hydra/sweeper=sequential hydra.sweeper.baseline=random \\
        hydra.sweeper.detect=30 hydra.sweeper.discordance=40 [hydra/launcher=local_shards|slurm_cpu]

The sweep's jobs (the cartesian product of its overrides, as Hydra's basic sweeper makes it) are launched once per
round. Before a round the sweeper writes `sequential_state.json` into the sweep dir (sweeps/sequential_state.py:
the round's end, the tasks stopped so far); each job runs only its tasks' episodes before that end, none past a stop
(app/main.py). After the round it reads the shard files and judges each candidate combination against its baseline
combination, task by task (round_decisions.py), or without a baseline each combination's tasks on the episodes of
all its shards as one process would (one_policy_rounds.py); a combination whose every task stopped is not launched
again. The merge (callbacks.MergeShards, when the sweep ends) publishes each combination with the stopping summary.

Hydra's BasicSweeper lives in hydra._internal, so this is a `hydra.plugins.sweeper.Sweeper` of its own; the class
Hydra instantiates is hydra_plugins/lerobot_hydra_launchers/launchers.py:SequentialSweeper.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.labels import combination_label
from lerobot_hydra.core.layout import MULTIRUN_FILE
from lerobot_hydra.launch.one_policy_rounds import OnePolicyDecisions
from lerobot_hydra.launch.round_decisions import PairedDecisions, Settings, pair_combinations
from lerobot_hydra.launch.shards import shard_sweep_total, with_num_shards
from lerobot_hydra.results.sequential import round_ends, rounds
from lerobot_hydra.schemas.schema import SequentialConfig
from lerobot_hydra.sweeps.sequential_state import write_state

log = logging.getLogger("lerobot_hydra")


class SequentialSweep(Sweeper):
    def __init__(
        self,
        baseline: str | None = None,
        detect: float | None = None,
        discordance: float | None = None,
        alpha: float = 0.05,
        beta: float = 0.2,
    ) -> None:
        # Checked in setup: an error raised here would reach the user wrapped in Hydra's instantiation error.
        self.given = (baseline, detect, discordance, alpha, beta)
        self.baseline = ""
        self.settings = Settings(alpha, beta, 0.0, 0.0)
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        baseline, detect, discordance, alpha, beta = self.given
        if baseline or detect is not None or discordance is not None:  # else one policy (checked in sweep)
            if not baseline or detect is None or discordance is None:
                raise UserError(
                    "hydra/sweeper=sequential needs hydra.sweeper.baseline (e.g. random, of policy=random,...), "
                    "hydra.sweeper.detect and hydra.sweeper.discordance (points; lerobot-hydra-plan helps)"
                )
            if not (0 < detect <= 100 and 0 < discordance <= 100 and 0 < alpha < 1 and 0 < beta < 1):
                raise UserError("hydra.sweeper: give 0 < detect, discordance <= 100 (points) and 0 < alpha, beta < 1")
            self.baseline = str(baseline)
            self.settings = Settings(float(alpha), float(beta), float(detect) / 100, float(discordance) / 100)
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> list[Sequence[JobReturn]]:
        assert self.config is not None
        jobs = expand(arguments)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / MULTIRUN_FILE)
        labels = [combination_label(job) for job in jobs]
        n_max, round_size, one = self._sizes(jobs, labels)
        state: PairedDecisions | OnePolicyDecisions
        if self.baseline:
            pairs = pair_combinations(sorted(set(labels)), self.baseline)
            state = PairedDecisions(self.settings, self.baseline, n_max, pairs)
        else:
            state = OnePolicyDecisions(one, n_max)
        returns: list[Sequence[JobReturn]] = []
        published: set[str] = set()  # combinations launched once more after their last stop: their files say so

        def launch(end: int) -> None:
            """The round up to `end`: every combination not yet published, the finished ones for the last time."""
            finishing = {label for label in labels if state.finished(label)} - published
            self._write(sweep_dir, end, state, finishing)
            active = [j for j, label in enumerate(labels) if label not in published]
            log.info("sequential sweep: round up to episode %d, %d of %d jobs", end, len(active), len(jobs))
            for start, segment in _contiguous(active):
                results = self.launcher.launch([jobs[j] for j in segment], initial_job_idx=start)
                for r in results:
                    _ = r.return_value  # raises the job's error, as Hydra's basic sweeper does
                returns.append(results)
            published.update(finishing)

        def judge(end: int) -> bool:
            for line in state.decide(sweep_dir, end):
                log.info("sequential sweep: %s", line)
            return all(state.finished(label) for label in labels)

        ends = rounds(n_max, round_size)
        end = ends[0]
        for end in round_ends(n_max, round_size, judge):
            launch(end)
        launch(next((e for e in ends if e > end), ends[-1]))  # every task stopped: their files say so
        return returns

    def _write(self, sweep_dir: Path, end: int, state: PairedDecisions | OnePolicyDecisions, final: set[str]) -> None:
        stops = {label: {k: n for k, (n, _) in state.stops.get(label, {}).items()} for label in state.labels}
        summaries = {label: state.summary(label) for label in state.labels}
        write_state(sweep_dir, end, state.n_max, self.baseline, stops, summaries, final)

    def _sizes(self, jobs: list[list[str]], labels: list[str]) -> tuple[int, int, dict[str, SequentialConfig]]:
        """(eval.n_episodes, eval.sequential.round), which every combination must share, and each one's
        eval.sequential (one-policy stopping: without hydra.sweeper.baseline)."""
        from lerobot_hydra.schemas.schema import validate

        assert self.config is not None and self.hydra_context is not None
        seen, one = set(), {}
        for job, label in zip(
            with_num_shards(jobs, shard_sweep_total(list(self.config.hydra.overrides.task))), labels, strict=True
        ):
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(job))
            ev = validate(cfg, sweep_rounds=True)
            if self.baseline and ev.sequential.stop is not None:
                raise UserError(
                    "eval.sequential.stop stops one policy's tasks on their own; leave it out with "
                    "hydra.sweeper.baseline, where the paired test decides (eval.sequential.round sets the round)"
                )
            if not self.baseline and ev.sequential.stop is None:
                raise UserError(
                    "hydra/sweeper=sequential needs hydra.sweeper.baseline, hydra.sweeper.detect and "
                    "hydra.sweeper.discordance (two policies; lerobot-hydra-plan helps) or eval.sequential.stop (one)"
                )
            seen.add((ev.n_episodes, ev.sequential.round))
            one[label] = ev.sequential
        if len(seen) != 1:
            raise UserError(
                "the combinations of a sequential sweep must share eval.n_episodes and "
                "eval.sequential.round; set them once, outside the swept values"
            )
        return (*seen.pop(), one)


def expand(arguments: Sequence[str]) -> list[list[str]]:
    """The sweep's jobs: every combination of the swept values, in order (as Hydra's basic sweeper lists them)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lists = []
    for o in OverridesParser.create().parse_overrides(list(arguments)):
        if o.is_sweep_override():
            lists.append([f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()])
        else:
            lists.append([str(o.input_line)])
    return [list(job) for job in itertools.product(*lists)]


def _contiguous(indices: list[int]) -> list[tuple[int, list[int]]]:
    """Runs of consecutive job indices, so that each job keeps its number (its dir) whichever jobs are left."""
    runs: list[tuple[int, list[int]]] = []
    for i in indices:
        if runs and runs[-1][1][-1] == i - 1:
            runs[-1][1].append(i)
        else:
            runs.append((i, [i]))
    return runs
