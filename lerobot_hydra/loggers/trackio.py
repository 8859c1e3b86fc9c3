"""Trackio (Hugging Face's local-first experiment tracker, LeRobot 0.7's trainer's): the same content as the W&B
logger (loggers/wandb_payload.py: summary metrics with intervals, per-task and episode tables, plots, videos),
one Trackio run per result set; or, when a Trackio run is already active in this process (a training loop's,
evaluating through the Python API), into that run under `prefix`, at the trainer's step.

Runs are stored locally (TRACKIO_DIR, default ~/.cache/huggingface/trackio; `trackio show` opens the dashboard)
unless `space_id` names a Hugging Face Space. A Trackio failure is a single warning, never a failed evaluation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lerobot_hydra.core.errors import missing_extra
from lerobot_hydra.loggers.base import LoggerConfig, RunMeta, SettingError
from lerobot_hydra.loggers.wandb_payload import results_payload
from lerobot_hydra.loggers.wandb_sweep import sweep_payload
from lerobot_hydra.results.aggregate import Results

log = logging.getLogger("lerobot_hydra")


@dataclass
class TrackioLoggerConfig(LoggerConfig):
    project: str = "lerobot_hydra"
    # None: named after the run (or sweep) directory, the swept overrides and the shard.
    name: str | None = None
    # None: the sweep's name for shards, merged runs and multirun jobs.
    group: str | None = None
    # A Hugging Face Space (user/name) to log to; None: locally, under TRACKIO_DIR.
    space_id: str | None = None
    # Videos logged per run, spread over tasks (first episode of every task first); 0: none.
    max_videos: int = 50
    # Into a run already active in the process (a trainer's): every key under `<prefix>/`.
    prefix: str = "eval"

    requires = ("trackio", "trackio")  # checked before the run; a broken install is a warning when logging
    requires_python = (3, 12)  # the extra's marker (pyproject.toml): LeRobot 0.4.4 pins huggingface-hub too low

    def __post_init__(self) -> None:
        if self.max_videos < 0:
            raise SettingError("max_videos", f"must be 0 or more, got {self.max_videos}")

    def build(self) -> TrackioLogger:
        return TrackioLogger(self)


class TrackioLogger:
    """Logs each result set as one Trackio run, or into the active one (an `ExperimentLogger`)."""

    def __init__(self, config: TrackioLoggerConfig) -> None:
        self.config = config
        self._warned = False

    def log_results(self, results: Results, out_dir: Path, run: RunMeta, images: dict[str, Path]) -> None:
        videos = self.config.max_videos if run.log_videos else 0
        config = run.config if results.provenance is None else {**run.config, "provenance": results.provenance}
        self._safely(
            out_dir,
            run,
            config,
            lambda trackio: results_payload(trackio, results, out_dir, images, videos, video_lists=False),
        )

    def log_sweep(self, summary: dict[str, Any], out_dir: Path, run: RunMeta, images: dict[str, Path]) -> None:
        self._safely(out_dir, run, run.config, lambda trackio: sweep_payload(trackio, summary, images))

    def _safely(self, out_dir: Path, run: RunMeta, config: dict[str, Any], payload: Any) -> None:
        try:
            import trackio
        except ImportError:
            self._warn("Trackio logging skipped: %s", missing_extra("trackio", "trackio"))
            return
        try:
            self._log(trackio, run, config, payload(trackio))
        except Exception as err:  # noqa: BLE001 - Trackio never fails an evaluation
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            self._warn(
                "Trackio logging failed (%s: %s); the results are on disk in %s", type(err).__name__, first, out_dir
            )

    def _log(self, trackio: Any, run: RunMeta, config: dict[str, Any], payload: dict[str, Any]) -> None:
        from trackio import context_vars

        active = context_vars.current_run.get()
        if active is not None:
            prefixed = {f"{self.config.prefix}/{key}": value for key, value in payload.items()}
            active.log(prefixed, step=run.step)
            log.info("Trackio: logged into the active run '%s' under %s/", active.name, self.config.prefix)
            return
        cfg = self.config
        name = f"{cfg.name} {run.detail}".strip() if cfg.name else run.name
        own = trackio.init(
            project=cfg.project, name=name, group=cfg.group or run.group, config=config, space_id=cfg.space_id
        )
        try:
            own.log(payload, step=run.step)
        finally:
            trackio.finish()
        log.info("Trackio run '%s' in project %s (%s)", name, cfg.project, run.job_type)

    def _warn(self, message: str, *args: Any) -> None:
        if not self._warned:
            self._warned = True
            log.warning(message, *args)
