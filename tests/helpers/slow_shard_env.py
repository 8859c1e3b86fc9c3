"""MetaWorld with a sleep in every step, longer in one shard only: one shard of a sweep runs slower while every
shard has the same configuration (so they merge as one run; the episodes' outcomes are MetaWorld's own). The shard
is the SLURM array task (a sweep's shard id), for shards started by hand `LEROBOT_HYDRA_TEST_SHARD`, else the
`eval.shard_id` override of the sweep job running in this process (a Ray task)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig, MetaWorldTaskEnv


@dataclass
class SlowShardMetaWorldConfig(MetaWorldEnvConfig):
    step_sleep_s: float = 0.0  # every shard's steps
    slow_array_task: int = -1  # the shard whose steps sleep `slow_step_sleep_s` instead
    slow_step_sleep_s: float = 0.0

    def build(self, task: TaskSpec, render: bool) -> Any:
        shard = os.environ.get("SLURM_ARRAY_TASK_ID", os.environ.get("LEROBOT_HYDRA_TEST_SHARD")) or _job_shard()
        slow = shard == str(self.slow_array_task)
        return _SlowTaskEnv(self, task, render, self.slow_step_sleep_s if slow else self.step_sleep_s)


def _job_shard() -> str | None:
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    ids = [o.split("=", 1)[1] for o in HydraConfig.get().overrides.task if o.startswith("eval.shard_id=")]
    return ids[0] if ids else None


class _SlowTaskEnv(MetaWorldTaskEnv):
    def __init__(self, config: MetaWorldEnvConfig, task: TaskSpec, render: bool, sleep_s: float) -> None:
        super().__init__(config, task, render)
        self._sleep_s = sleep_s

    def step(self, action: np.ndarray) -> Any:
        time.sleep(self._sleep_s)
        return super().step(action)
