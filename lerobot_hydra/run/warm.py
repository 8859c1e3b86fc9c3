"""What a run keeps warm and its owner closes: the run's parts (rollout/build.py), its loggers and its env pools
(run/pools.py). eval.py opens one per run (`Warm.opened`); the Python API's `Evaluator` keeps one across its
evaluations, rebuilding the parts only when a policy reads other observations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from omegaconf import DictConfig

from lerobot_hydra.loggers.base import ExperimentLogger, build_loggers
from lerobot_hydra.rollout.build import RunParts, build_run
from lerobot_hydra.run.pools import KeptPools


@dataclass
class Warm:
    parts: RunParts
    loggers: list[ExperimentLogger]
    pools: KeptPools = field(default_factory=KeptPools)

    @classmethod
    @contextmanager
    def opened(cls, cfg: DictConfig) -> Iterator[Warm]:
        """The parts, loggers and pools of one run of `cfg`; its pools are closed on leaving."""
        warm = cls(build_run(cfg), build_loggers(cfg.get("logger")))
        try:
            yield warm
        finally:
            warm.pools.close()
