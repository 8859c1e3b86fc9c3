"""What our Ray launcher adds to the official hydra-ray-launcher's (the class Hydra instantiates is
hydra_plugins/lerobot_hydra_launchers/launchers.py:RayLauncher, this mixin over the plugin's RayLauncher; schemas.py
stores its settings, the plugin's own, under hydra/launcher=ray; presets: conf/hydra/launcher/ray_cpu, ray_gpu).

What it adds: a shard sweep's jobs get `eval.num_shards` (shards.py); the cluster is joined through ray_connect.py
(no cluster at the address: one line); each job is a Ray task with `hydra.launcher.ray.remote` as its options, in a
fresh worker process (`max_calls=1`) that works in the sweep's working directory when its node has it (as a SLURM
job works in the directory it was submitted from); every task is awaited, and the ones that died or failed are named
together (ray_outcomes.py) instead of the plugin's first error. The plugin's `launch` submits and waits in one
function, so this is the whole of `launch`, on Ray's public task API, with the plugin's settings.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from lerobot_hydra.launch.outcomes import SUBMITTED
from lerobot_hydra.launch.ray_connect import connect
from lerobot_hydra.launch.ray_outcomes import failed_tasks
from lerobot_hydra.launch.shards import shard_sweep_total, with_num_shards

log = logging.getLogger(__name__)


class RayShard:
    """A submitted job's Ray task, as the policy server's callback sees the sweep's jobs (`done`)."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref
        self.job_id = ref.task_id().hex()
        self.ended = False

    def done(self) -> bool:
        if not self.ended:
            import ray

            self.ended = bool(ray.wait([self.ref], timeout=0)[0])
        return self.ended


class RaySweep:
    """`launch` for the Ray launcher: one Ray task per job, wait for all, report each failed one."""

    config: DictConfig | None
    hydra_context: HydraContext | None
    task_function: TaskFunction | None
    ray_cfg: DictConfig

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import ray

        config, context, task = self.config, self.hydra_context, self.task_function
        assert config is not None and context is not None and task is not None
        jobs = with_num_shards(job_overrides, shard_sweep_total(list(config.hydra.overrides.task)))
        setup_globals()
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)
        connect(self.ray_cfg.init)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"Ray launcher: {len(jobs)} tasks, sweep output dir: {sweep_dir}")
        remote = ray.remote(**task_options(self.ray_cfg.remote))(run_in_worker)
        shards = []
        for idx, overrides in enumerate(jobs, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            job_config = context.config_loader.load_sweep_config(config, list(overrides))
            with open_dict(job_config):
                job_config.hydra.job.num = idx
            ref = remote.remote(context, job_config, task, Singleton.get_state(), os.getcwd())
            shards.append(RayShard(ref))
        SUBMITTED.extend(shards)
        return _results(shards, jobs)


def task_options(remote: DictConfig | None) -> dict[str, Any]:
    """`hydra.launcher.ray.remote` as `ray.remote` options; each job in a worker process of its own."""
    options: dict[str, Any] = dict(OmegaConf.to_container(remote, resolve=True) or {}) if remote else {}  # type: ignore[arg-type]
    options.setdefault("max_calls", 1)
    return options


def _results(shards: list[RayShard], jobs: list[list[str]]) -> list[JobReturn]:
    """Every task's JobReturn once all have ended; SweepJobsFailed naming each one that did not succeed."""
    import ray

    try:
        ray.wait([s.ref for s in shards], num_returns=len(shards))
    except KeyboardInterrupt:
        for shard in shards:
            ray.cancel(shard.ref)
        print(
            "lerobot_hydra: stopped (Ctrl-C); the shard tasks were cancelled (Ray ends a driver's tasks with it): run "
            "the same command again to resume them",
            file=sys.stderr,
        )
        raise SystemExit(130) from None
    outcomes: list[tuple[str, Any, list[str]]] = []
    for shard, overrides in zip(shards, jobs, strict=True):
        shard.ended = True
        try:
            outcomes.append((shard.job_id, ray.get(shard.ref), overrides))
        except ray.exceptions.RayError as err:
            outcomes.append((shard.job_id, err, overrides))
    error = failed_tasks(outcomes)
    if error is not None:
        raise error
    return [result for _, result, _ in outcomes]


def run_in_worker(
    hydra_context: HydraContext, config: DictConfig, task: TaskFunction, singleton_state: Any, cwd: str
) -> JobReturn:
    """A job of the sweep in a Ray worker: Hydra's state as the launching process had it, the job id Ray's."""
    import ray

    if Path(cwd).is_dir():
        os.chdir(cwd)
    setup_globals()
    Singleton.set_state(singleton_state)
    with open_dict(config):
        config.hydra.job.id = ray.get_runtime_context().get_task_id()
    HydraConfig.instance().set_config(config)
    return run_job(
        hydra_context=hydra_context,
        task_function=task,
        config=config,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
