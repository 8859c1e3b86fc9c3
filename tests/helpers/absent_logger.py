"""A logger whose package is not installed anywhere (`logger.csv._target_=tests.helpers.absent_logger.AbsentConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

from lerobot_hydra.loggers.csv import CsvLoggerConfig


@dataclass
class AbsentConfig(CsvLoggerConfig):
    requires = ("lerobot_hydra_no_such_package", "absent")
