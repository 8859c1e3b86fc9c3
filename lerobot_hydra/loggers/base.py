"""The experiment-logger contract: where a result set goes besides the files on disk (which stay the record).

`logger` in the config is a mapping of sink name -> node whose `_target_` is a `LoggerConfig` (`logger=wandb`
gives `{wandb: {...}}`; `logger=[wandb,csv]` or a YAML whose defaults list several combines them). Each config is
validated against its dataclass, then `build()` returns an `ExperimentLogger`. `RunMeta` says which run a result set
belongs to (see run_meta.py for how each kind of run is named).
"""

from __future__ import annotations

import abc
import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.loggers.bounded import call_bounded
from lerobot_hydra.results.aggregate import Results

LOGGER_KEY = "logger"
# Every sink takes it: seconds one of its calls may take before it is left behind (loggers/bounded.py).
TIMEOUT_KEY = "timeout_s"
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RunMeta:
    """Which run a result set belongs to."""

    job_type: str  # eval | shard | merged | sweep
    # Stable identity: results logged under the same key go to the same run (a resumed shard, a re-run merge).
    key: str
    # Display name: `base_name` (the run or sweep dir) followed by `detail` (swept overrides, shard, merged).
    base_name: str
    detail: str
    group: str | None
    config: dict[str, Any]
    # Shards leave media to the merged run.
    log_videos: bool = True
    # The trainer's step of an evaluation from a training loop (the Python API): the x-axis in an active run.
    step: int | None = None

    @property
    def name(self) -> str:
        return f"{self.base_name} {self.detail}".strip()

    @property
    def run_id(self) -> str:
        return hashlib.sha256(self.key.encode()).hexdigest()[:20]


class ExperimentLogger(Protocol):
    def log_results(self, results: Results, out_dir: Path, run: RunMeta, images: dict[str, Path]) -> None:
        """Log one result set (its video paths relative to `out_dir`); never raises (a failure is a warning)."""

    def log_sweep(self, summary: dict[str, Any], out_dir: Path, run: RunMeta, images: dict[str, Path]) -> None:
        """Log a sweep's summary (summary.sweep_summary: combinations, multi-seed pools, comparisons); never raises."""


class Bounded:
    """An `ExperimentLogger` whose every call returns within `timeout_s` seconds (loggers/bounded.py)."""

    def __init__(self, name: str, inner: ExperimentLogger, timeout_s: float) -> None:
        self.name, self.inner, self.timeout_s = name, inner, timeout_s

    def log_results(self, results: Results, out_dir: Path, run: RunMeta, images: dict[str, Path]) -> None:
        call_bounded(self.name, self.timeout_s, out_dir, self.inner.log_results, results, out_dir, run, images)

    def log_sweep(self, summary: dict[str, Any], out_dir: Path, run: RunMeta, images: dict[str, Path]) -> None:
        call_bounded(self.name, self.timeout_s, out_dir, self.inner.log_sweep, summary, out_dir, run, images)


class LoggerConfig(abc.ABC):
    """A sink's settings (a dataclass named by a `_target_` under `logger.<name>`)."""

    # (module, extra) a sink needs installed: checked when the loggers are built, before anything runs.
    requires: ClassVar[tuple[str, str] | None] = None
    # The oldest Python its extra installs on (None: any): below it, installing the extra is no fix.
    requires_python: ClassVar[tuple[int, int] | None] = None

    @abc.abstractmethod
    def build(self) -> ExperimentLogger:
        """The logger these settings describe."""


class SettingError(UserError):
    """A sink setting with a bad value, raised by its config; reported as `logger.<name>.<setting> <problem>`."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting} {problem}")
        self.setting, self.problem = setting, problem


def build_loggers(node: Any) -> list[ExperimentLogger]:
    """The loggers the `logger` mapping configures (none for logger=none); bad keys or values fail here, before
    any rollout."""
    if not node:
        return []
    from omegaconf import DictConfig, OmegaConf

    from lerobot_hydra.schemas.schema import instantiate_node, validate_node

    if not isinstance(node, DictConfig):
        node = OmegaConf.create(dict(node))
    if "_target_" in node:
        raise UserError(
            f"'{LOGGER_KEY}' maps names to sinks ({LOGGER_KEY}: {{wandb: {{_target_: ...}}}}), not one sink; "
            f"choose them with {LOGGER_KEY}=wandb or {LOGGER_KEY}=[wandb,csv]"
        )
    loggers = []
    for name, sink in node.items():
        key = f"{LOGGER_KEY}.{name}"
        if not isinstance(sink, DictConfig) or "_target_" not in sink:
            raise UserError(f"'{key}' must be a sink with a _target_; choose sinks with {LOGGER_KEY}=<name>")
        timeout_s = _timeout(sink, key)
        sink = OmegaConf.masked_copy(sink, [k for k in sink.keys() if k != TIMEOUT_KEY])
        validate_node(sink, key)
        try:
            config = instantiate_node(sink)
        except SettingError as err:
            raise UserError(f"{key}.{err.setting} {err.problem}") from None
        if not isinstance(config, LoggerConfig):
            raise UserError(f"{key}._target_ must name a LoggerConfig subclass, got {type(config).__name__}")
        _check_installed(config, key)
        loggers.append(Bounded(str(name), config.build(), timeout_s))
    return loggers


def _check_installed(config: LoggerConfig, key: str) -> None:
    if config.requires is None or importlib.util.find_spec(config.requires[0]) is not None:
        return
    module, extra = config.requires
    if config.requires_python is not None and sys.version_info[:2] < config.requires_python:
        version = ".".join(map(str, config.requires_python))
        raise UserError(
            f"{key} needs the package '{module}', which needs Python >= {version} here (the '{extra}' extra installs "
            f"nothing on this Python {sys.version_info.major}.{sys.version_info.minor}): run with Python >= {version} "
            f"or leave {key} out of {LOGGER_KEY}"
        )
    raise UserError(
        f"{key} needs the package '{module}', which is not installed: install it with pip install -e \".[{extra}]\" "
        f"or leave {key} out of {LOGGER_KEY}"
    )


def _timeout(sink: Any, key: str) -> float:
    """`logger.<name>.timeout_s`, which every sink takes: the longest one of its calls may take."""
    value = sink.get(TIMEOUT_KEY, DEFAULT_TIMEOUT_S)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise UserError(f"{key}.{TIMEOUT_KEY} must be a positive number of seconds, got {value}")
    return float(value)
