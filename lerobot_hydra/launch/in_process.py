"""The jobs of a sweep one after the other in this process: what `hydra/launcher=basic` (Hydra's default) runs, with a
shard sweep's `eval.num_shards` filled in (shards.py). Hydra's own basic launcher cannot be extended publicly (it
lives in hydra._internal), so this is ours, on Hydra's public Launcher interface and job helpers; the class Hydra
instantiates is hydra_plugins/lerobot_hydra_launchers/launchers.py:BasicLauncher.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.launch.shards import shard_sweep_total, with_num_shards
from lerobot_hydra.store.job_files import remove_refused

log = logging.getLogger(__name__)


class InProcessLauncher(Launcher):
    """Runs the jobs of a sweep one after the other in this process (Hydra's default, `hydra/launcher=basic`)."""

    def __init__(self) -> None:
        super().__init__()
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        config, context, task = self.config, self.hydra_context, self.task_function
        assert config is not None and context is not None and task is not None
        jobs = with_num_shards(job_overrides, shard_sweep_total(list(config.hydra.overrides.task)))
        setup_globals()
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)
        Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(jobs)} jobs locally")
        runs = []
        for idx, overrides in enumerate(jobs, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            job_config = context.config_loader.load_sweep_config(config, overrides)
            with open_dict(job_config):
                job_config.hydra.job.id = idx
                job_config.hydra.job.num = idx
            runs.append(
                run_job(
                    hydra_context=context,
                    task_function=task,
                    config=job_config,
                    job_dir_key="hydra.sweep.dir",
                    job_subdir_key="hydra.sweep.subdir",
                )
            )
            configure_log(config.hydra.hydra_logging, config.hydra.verbose)
        refuse_if_refused(runs, Path(str(config.hydra.sweep.dir)))
        return runs


def refuse_if_refused(runs: Sequence[JobReturn], sweep_dir: Path) -> None:
    """When the sweep's first failed job was refused (a `UserError`, e.g. more shards than episodes), that error,
    raised here: Hydra would print its multi-line "Error executing job with overrides" before our one line. A
    sweep dir left with nothing but what Hydra wrote goes."""
    failed = next((r for r in runs if r.status == JobStatus.FAILED), None)
    # `_return_value` holds a failed job's exception; the `return_value` property prints that line, then raises it.
    if failed is not None and isinstance(failed._return_value, UserError):
        remove_refused(sweep_dir)
        raise failed._return_value
