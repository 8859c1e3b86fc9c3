"""A run's `.hydra/` files and job log, written only once the run holds its dir's lock.

Hydra would write `.hydra/{config,hydra,overrides}.yaml` and start the job log (`<job name>.log`) before the
run takes its lock (conf/config.yaml sets `hydra.output_subdir: null`), so a process refused by the lock, or by
the identity check of a resume, would overwrite the saved overrides of the run that owns the dir (and the resume
and merge commands built from them). Here the same files, with the content Hydra writes, are saved by the
process that holds the lock, after its identity check; log lines are held in memory until then and written to
the job log only by that process. A refused process adds nothing to the dir: its error goes to the terminal, and
the dir goes when Hydra made it for this process alone (nothing but its job log in it).
"""

from __future__ import annotations

import logging
import logging.handlers
import shutil
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lerobot_hydra.core.job_log import OffConsole
from lerobot_hydra.core.layout import (
    HYDRA_CONFIG_FILE,
    HYDRA_DIR,
    HYDRA_HYDRA_FILE,
    HYDRA_OVERRIDES_FILE,
    only_hydra_files,
)


class JobFiles:
    """Within `with`, log records bound for files in `run_dir` wait in memory; `save()` (call it once the run
    holds the lock) writes `.hydra/` and releases them to the job log, which then gets every later line."""

    def __init__(self, run_dir: Path, task_cfg: DictConfig, hydra_cfg: DictConfig) -> None:
        self.run_dir = run_dir.resolve()
        self._task_cfg = task_cfg
        self._hydra_cfg = hydra_cfg
        self._root = logging.getLogger()
        self._files: list[logging.FileHandler] = []
        self._buffer = logging.handlers.MemoryHandler(capacity=1 << 30, flushLevel=logging.CRITICAL + 1)
        self._consoles: list[logging.Handler] = []
        self._off_console = OffConsole()
        self._saved = False

    def __enter__(self) -> JobFiles:
        self._files = [
            h
            for h in self._root.handlers
            if isinstance(h, logging.FileHandler) and Path(h.baseFilename).resolve().is_relative_to(self.run_dir)
        ]
        if self._files:
            self._buffer.setFormatter(self._files[0].formatter)
            self._buffer.setLevel(min(h.level for h in self._files))
            for handler in self._files:
                self._root.removeHandler(handler)
            self._root.addHandler(self._buffer)
            # With a job log, the lines meant for it alone (core/job_log.py) stay off the console.
            self._consoles = [
                h for h in self._root.handlers if h is not self._buffer and not isinstance(h, logging.FileHandler)
            ]
            for handler in self._consoles:
                handler.addFilter(self._off_console)
        return self

    def save(self) -> None:
        """Writes `.hydra/` as Hydra would and lets the held log lines (and all later ones) into the job log."""
        out = self.run_dir / HYDRA_DIR
        out.mkdir(parents=True, exist_ok=True)
        hydra_node = self._hydra_cfg.hydra
        for name, cfg in (
            (HYDRA_CONFIG_FILE, self._task_cfg),
            (HYDRA_HYDRA_FILE, self._hydra_cfg),
            (HYDRA_OVERRIDES_FILE, hydra_node.overrides.task),
        ):
            (out / name).write_text(OmegaConf.to_yaml(cfg), encoding="utf-8")
        self._release(write=True)
        self._saved = True

    def _release(self, write: bool) -> None:
        if not self._files:
            return
        self._root.removeHandler(self._buffer)
        for record in self._buffer.buffer if write else []:
            for handler in self._files:
                if record.levelno >= handler.level:
                    handler.handle(record)
        self._buffer.buffer.clear()
        if write:
            for handler in self._files:
                self._root.addHandler(handler)
        self._files = []

    def __exit__(self, *exc: object) -> None:
        # Never locked (refused, or stopped before): its lines stay out of a log that is not its own, and the dir
        # Hydra made for it goes when nothing else is in it.
        if not self._saved:
            self._release(write=False)
        for handler in self._consoles:
            handler.removeFilter(self._off_console)
        self._consoles = []
        if not self._saved:
            remove_refused(self.run_dir)


def remove_refused(root: Path) -> None:
    """The dir of a run or sweep refused before it wrote anything: removed with what Hydra wrote there (job logs,
    multirun.yaml). A dir holding anything else, the working directory and the dirs above it stay."""
    root, here = root.resolve(), Path.cwd().resolve()
    if root.is_dir() and root != here and root not in here.parents and only_hydra_files(root):
        shutil.rmtree(root, ignore_errors=True)
