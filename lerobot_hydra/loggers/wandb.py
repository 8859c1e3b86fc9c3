"""Weights & Biases: one W&B run per result set (a single evaluation, a shard, a merged sweep) and per sweep summary;
or, when a W&B run is already active in this process (a training loop's, evaluating through the Python API), the
result set goes into that run under `prefix`, at the trainer's step.

Everything is logged once the results are on disk, never from the rollout. A W&B failure (package missing,
no network, bad key) is a single warning: the evaluation carries on and its files remain the record.
"""

from __future__ import annotations

import dataclasses
import logging
import netrc
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lerobot_hydra.core.errors import missing_extra
from lerobot_hydra.loggers.base import LoggerConfig, RunMeta, SettingError
from lerobot_hydra.loggers.wandb_payload import results_payload
from lerobot_hydra.loggers.wandb_sweep import sweep_payload
from lerobot_hydra.results.aggregate import Results

log = logging.getLogger("lerobot_hydra")

MODES = ("online", "offline", "disabled")
# wandb.init waits this long for its service before giving up (its own default is 90 s).
INIT_TIMEOUT_S = 30.0

_said: set[str] = set()


def _say_once(key: str, level: int, message: str, *args: Any) -> None:
    if key not in _said:
        _said.add(key)
        log.log(level, message, *args)


def api_key_configured() -> bool:
    """WANDB_API_KEY is set, or the netrc file has an entry for the W&B host (as `wandb login` writes)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


@dataclass
class WandbLoggerConfig(LoggerConfig):
    project: str = "lerobot_hydra"
    entity: str | None = None
    # None: the sweep's name for shards and merged runs (and runs of a multirun); no group for a single run.
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    # online | offline | disabled; None: WANDB_MODE if set, else online when an API key is configured, else offline.
    mode: str | None = None
    # None: eval (a single run), shard or merged.
    job_type: str | None = None
    # None: named after the run (or sweep) directory, the swept overrides and the shard.
    name: str | None = None
    notes: str | None = None
    # Where W&B keeps its files (a wandb/ folder is created in it); None: the run's output dir.
    dir: str | None = None
    # Videos uploaded per run, spread over tasks (first episode of every task first); 0: none.
    max_videos: int = 50
    # Into a run already active in the process (a trainer's): every key under `<prefix>/`.
    prefix: str = "eval"

    requires = ("wandb", "wandb")  # checked before the run; a broken install is a warning when logging

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in MODES:
            raise SettingError("mode", f"must be one of {', '.join(MODES)} (or null for automatic), got '{self.mode}'")
        if self.max_videos < 0:
            raise SettingError("max_videos", f"must be 0 or more, got {self.max_videos}")

    def build(self) -> WandbLogger:
        return WandbLogger(self)

    def resolved_mode(self, wandb_dir: Path) -> str:
        if self.mode is not None:
            return self.mode
        env_mode = os.environ.get("WANDB_MODE")
        if env_mode in MODES:
            return env_mode
        if api_key_configured():
            return "online"
        _say_once(
            "offline",
            logging.INFO,
            "W&B: no API key configured (WANDB_API_KEY or `wandb login`), so runs are logged offline under %s; "
            "upload them later with: wandb sync %s/offline-run-*",
            wandb_dir,
            wandb_dir,
        )
        return "offline"


class WandbLogger:
    """Logs each result set as one W&B run (an `ExperimentLogger`)."""

    def __init__(self, config: WandbLoggerConfig) -> None:
        self.config = config

    def log_results(self, results: Results, out_dir: Path, run: RunMeta, images: dict[str, Path]) -> None:
        if results.provenance is not None:  # what made the results (versions, checkpoint, device) beside the config
            run = dataclasses.replace(run, config={**run.config, "provenance": results.provenance})
        self._safely(out_dir, run, lambda wandb: self._payload(wandb, results, out_dir, run, images))

    def log_sweep(self, summary: dict[str, Any], out_dir: Path, run: RunMeta, images: dict[str, Path]) -> None:
        self._safely(out_dir, run, lambda wandb: sweep_payload(wandb, summary, images))

    def _safely(self, out_dir: Path, run: RunMeta, payload: Callable[[Any], dict[str, Any]]) -> None:
        # W&B reports its own errors to Sentry (a third party) unless told not to; read when wandb is imported.
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
        try:
            import wandb
        except ImportError:
            _say_once("import", logging.WARNING, "W&B logging skipped: %s", missing_extra("wandb", "wandb"))
            return
        try:
            self._log(wandb, out_dir, run, payload)
        except Exception as err:  # noqa: BLE001 - W&B never fails an evaluation
            _say_once(
                "failed",
                logging.WARNING,
                "W&B logging failed (%s: %s); the results are on disk in %s",
                type(err).__name__,
                str(err).strip().splitlines()[0] if str(err).strip() else "",
                out_dir,
            )

    def _payload(
        self, wandb: Any, results: Results, out_dir: Path, run: RunMeta, images: dict[str, Path]
    ) -> dict[str, Any]:
        videos = self.config.max_videos if run.log_videos else 0
        return results_payload(wandb, results, out_dir, images, videos)

    def _log(self, wandb: Any, out_dir: Path, run: RunMeta, payload: Callable[[Any], dict[str, Any]]) -> None:
        if wandb.run is not None:
            self._into_active(wandb.run, run, payload(wandb))
            return
        cfg = self.config
        root = Path(cfg.dir) if cfg.dir else out_dir
        mode = cfg.resolved_mode(root / "wandb")
        if mode == "disabled":
            return
        root.mkdir(parents=True, exist_ok=True)
        if mode == "offline":
            remove_offline_runs(root / "wandb", run.run_id)
        wb_run = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            group=cfg.group or run.group,
            job_type=cfg.job_type or run.job_type,
            name=f"{cfg.name} {run.detail}".strip() if cfg.name else run.name,
            notes=cfg.notes,
            tags=list(cfg.tags),
            config=run.config,
            id=run.run_id,
            resume="allow" if mode == "online" else None,
            dir=str(root),
            mode=mode,
            settings=wandb.Settings(console="off", x_disable_stats=True, init_timeout=INIT_TIMEOUT_S, silent=True),
        )
        try:
            wb_run.log(payload(wandb))
            where = wb_run.url if mode == "online" else str(Path(wb_run.dir).parent)
        finally:
            wb_run.finish()
        log.info("W&B %s run '%s' (%s, group %s): %s", mode, wb_run.name, run.job_type, wb_run.group or "-", where)

    def _into_active(self, active: Any, run: RunMeta, payload: dict[str, Any]) -> None:
        """Into the trainer's run, at its step (W&B's next step when none is given)."""
        prefixed = {f"{self.config.prefix}/{key}": value for key, value in payload.items()}
        if run.step is None:
            active.log(prefixed)
        else:
            active.log(prefixed, step=run.step)
        log.info("W&B: logged into the active run '%s' under %s/ (step %s)", active.name, self.config.prefix, run.step)


def remove_offline_runs(wandb_dir: Path, run_id: str) -> None:
    """Earlier offline copies of this run (a resumed shard, a re-run merge) are superseded by the one about
    to be written, so that `wandb sync` uploads each run once."""
    for old in wandb_dir.glob(f"offline-run-*-{run_id}"):
        shutil.rmtree(old, ignore_errors=True)
