"""What our submitit launchers add to the hydra-submitit-launcher plugin's (the classes Hydra instantiates are
hydra_plugins/lerobot_hydra_launchers/launchers.py: this mixin over the plugin's LocalLauncher and SlurmLauncher;
schemas.py stores their settings under hydra/launcher=submitit_local and submitit_slurm).

What they add: a shard sweep's jobs get `eval.num_shards` (shards.py), the jobs are kept
(`outcomes.SUBMITTED`, for the policy server's callback), and a failed job is reported with every other job of the
sweep once all have ended (outcomes.py) instead of the plugin's first error. The job side (`__call__`, `checkpoint`
for requeues) is the plugin's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from omegaconf import OmegaConf

from lerobot_hydra.core.errors import UserError, did_you_mean
from lerobot_hydra.launch.outcomes import SUBMITTED, failed_jobs, say_sacct_warning_once, stopped_waiting
from lerobot_hydra.launch.shards import shard_sweep_total, with_num_shards
from lerobot_hydra.launch.slurm_limits import check_partition
from lerobot_hydra.store.job_files import remove_refused

log = logging.getLogger(__name__)
# Executor settings every submitit executor takes unprefixed; the others get the cluster's prefix (slurm_partition).
SHARED_PARAMETERS = {f.name for f in dataclasses.fields(BaseQueueConf)} - {"submitit_folder"}
# Settings submitit takes when the executor is made, not through update_parameters.
INIT_PARAMETERS = {"max_num_timeout"}


class SubmititSweep:
    """`launch` for a submitit launcher: submit every job as one array, wait for all, report each failed one.

    The plugin's `launch` makes its executor, submits and waits in one method, with no hook that hands out the jobs
    it submitted; so this is the whole of `launch`, on submitit's public executor API, with the plugin's settings.
    """

    _EXECUTOR: str
    config: Any
    params: dict[str, Any]

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None
        jobs_overrides = with_num_shards(job_overrides, shard_sweep_total(list(self.config.hydra.overrides.task)))
        say_sacct_warning_once()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        try:
            executor = self._executor()
        except UserError:
            remove_refused(sweep_dir)  # what Hydra wrote there (multirun.yaml)
            raise
        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {sweep_dir}")
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        arguments = []
        for idx, overrides in enumerate(jobs_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            arguments.append((overrides, "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        jobs = executor.map_array(self, *zip(*arguments, strict=True))
        SUBMITTED.extend(jobs)
        submitted = list(zip(jobs, jobs_overrides, strict=True))
        try:
            return [job.results()[0] for job in jobs]
        except KeyboardInterrupt:
            raise stopped_waiting(submitted) from None
        except Exception:  # noqa: BLE001 - a job that raised or died: reported with every other job of the sweep
            error = failed_jobs(submitted)
            if error is None:
                raise
            raise error from None

    def _executor(self) -> Any:
        import submitit

        cluster = self._EXECUTOR
        params = {k: v for k, v in self.params.items() if k != "submitit_folder"}
        launcher = OmegaConf.select(self.config, "hydra.runtime.choices", default={}).get("hydra/launcher", cluster)
        check_settings(cluster, params, launcher)
        if cluster == "slurm":
            check_partition(params, f"hydra/launcher={launcher}", "hydra.launcher")  # else pending, silently
        init = {f"{cluster}_{k}": params.pop(k) for k in INIT_PARAMETERS & set(params)}
        executor = submitit.AutoExecutor(folder=self.params["submitit_folder"], cluster=cluster, **init)
        executor.update_parameters(**{k if k in SHARED_PARAMETERS else f"{cluster}_{k}": v for k, v in params.items()})
        return executor


def check_settings(cluster: str, params: dict[str, Any], launcher: str) -> None:
    """A setting added with `+hydra.launcher.<key>=` that the plugin's schema lacks: one line, before anything is
    submitted or created (submitit would raise it as a NameError deep in the launch)."""
    from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf, SlurmQueueConf

    schema = {"local": LocalQueueConf, "slurm": SlurmQueueConf}[cluster]
    known = sorted(f.name for f in dataclasses.fields(schema) if not f.name.startswith("_"))
    unknown = [k for k in params if k not in known]
    if unknown:
        raise UserError(
            f"unknown launcher setting 'hydra.launcher.{unknown[0]}'{did_you_mean(unknown[0], known)}; see the "
            f"settings hydra/launcher={launcher} takes with: python eval.py hydra/launcher={launcher} --cfg hydra"
        )
