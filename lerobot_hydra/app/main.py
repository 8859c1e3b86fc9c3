"""Hydra entry point: compose, validate, evaluate, report."""

from __future__ import annotations

import gc
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from lerobot_hydra.app.cli import OURS, one_line_errors
from lerobot_hydra.app.probing import register
from lerobot_hydra.core.errors import EPISODE_ERRORS_EXIT, UserError, episode_errors_line
from lerobot_hydra.loggers.bounded import bounded_exit
from lerobot_hydra.results.aggregate import Results
from lerobot_hydra.rollout.signals import RunInterrupted, print_status, stop_signals
from lerobot_hydra.schemas import schema as schemas

if TYPE_CHECKING:
    from lerobot_hydra.run.work import RoundCap

log = logging.getLogger("lerobot_hydra")

# conf/ ships inside the package, our launchers and their presets under conf/hydra/launcher/ (launch/schemas.py).
CONFIG_PATH = "pkg://lerobot_hydra.conf"

# Hydra resolves a sweep job's dir (its resolver) before it calls `run`, in the job processes too, which get here by
# importing this module (they unpickle `_hydra_main`): so this module registers at import, explicitly.
register()


def run(cfg: DictConfig) -> Results:
    """Evaluate the composed config in Hydra's output dir; returns its results (a shard's: its part)."""
    import copy

    from lerobot_hydra.app.evaluation import evaluate_config
    from lerobot_hydra.run.sources import source_for
    from lerobot_hydra.store.job_files import JobFiles

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    with JobFiles(out_dir, cfg, copy.deepcopy(HydraConfig.instance().cfg)) as job_files:
        label = _job_label()
        cap = _sweep_round(label)
        eval_cfg = schemas.validate(cfg, sweep_rounds=cap is not None)
        with stop_signals():
            return evaluate_config(
                cfg, eval_cfg, out_dir, label, source=lambda run: source_for(run, cap), on_locked=job_files.save
            )


def _sweep_round(label: str) -> RoundCap | None:
    """In a sequential sweep (hydra/sweeper=sequential): the round its sweeper wrote into the sweep dir."""
    from lerobot_hydra.sweeps.sequential_state import job_round

    hydra_cfg = HydraConfig.get()
    target = str(OmegaConf.select(hydra_cfg, "sweeper._target_", default="") or "")
    if hydra_cfg.mode != RunMode.MULTIRUN or not target.endswith(".SequentialSweeper"):
        return None
    return job_round(Path(str(hydra_cfg.sweep.dir)), label)


def _job_label() -> str:
    """The job's overrides other than the shard ones: names a combination in a sweep (policy=a,env=b)."""
    from lerobot_hydra.core.labels import combination_label

    return combination_label(HydraConfig.get().overrides.task)


@hydra.main(config_path=CONFIG_PATH, config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    try:
        results = run(cfg)
    except RunInterrupted as stopped:
        # A SLURM job's status line goes to its log; its exit (no result) lets the sweep name its SLURM state.
        print_status(stopped)
        sys.exit(stopped.exit_code)
    except UserError as err:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            # Fail this job only: the launcher runs the others, then cli reports this error in one line.
            raise
        # HYDRA_FULL_ERROR=1 set by the user (not by one_line_errors): a simulator's own traceback (rollout/recovery.py)
        asked = os.environ.get("HYDRA_FULL_ERROR") == "1" and os.environ.get(OURS) != "1"
        if asked and getattr(err, "traceback", None):
            print(err.traceback, file=sys.stderr)
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    if results.overall.n_errors and HydraConfig.get().mode != RunMode.MULTIRUN:  # a sweep's: after its merge
        print(f"lerobot_hydra: {episode_errors_line(results.overall.n_errors)}", file=sys.stderr)
        sys.exit(EPISODE_ERRORS_EXIT)


def main() -> None:
    register()
    try:
        with one_line_errors():
            _hydra_main()
    except SystemExit as stop:
        _before_exit()
        bounded_exit(stop.code if isinstance(stop.code, int) else 1)
        raise
    _before_exit()
    bounded_exit(0)


def _before_exit() -> None:
    """The run is over (its files written and closed, its processes ended): the interpreter's shutdown need not
    search the whole heap (torch, LeRobot, the simulators: about half a million objects) for reference cycles,
    which takes a second or more; what it frees is the process's memory, which exiting frees anyway."""
    gc.freeze()


if __name__ == "__main__":
    main()
