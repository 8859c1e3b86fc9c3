"""MetaWorld whose steps are slowed in one SLURM array task only: one shard of a sweep runs slower while every
shard has the same configuration (so they merge as one run; the episodes' outcomes are MetaWorld's own)."""

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
    slow_array_task: int = -1  # the SLURM array task (= shard id in a sweep) whose steps are slowed
    step_sleep_s: float = 0.0

    def build(self, task: TaskSpec, render: bool) -> Any:
        slow = os.environ.get("SLURM_ARRAY_TASK_ID") == str(self.slow_array_task)
        return _SlowTaskEnv(self, task, render, self.step_sleep_s if slow else 0.0)


class _SlowTaskEnv(MetaWorldTaskEnv):
    def __init__(self, config: MetaWorldEnvConfig, task: TaskSpec, render: bool, sleep_s: float) -> None:
        super().__init__(config, task, render)
        self._sleep_s = sleep_s

    def step(self, action: np.ndarray) -> Any:
        time.sleep(self._sleep_s)
        return super().step(action)
