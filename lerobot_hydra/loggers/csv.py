"""CSV tables of results, to load with pandas or a spreadsheet without parsing eval_info.json.

`logger=csv` (or `logger=[wandb,csv]`) writes `results.csv` beside each result set (a run, a shard, a merged
combination): a row per task, per group and overall, each naming its run, so the files of many runs concatenate
into one table. A sweep of several combinations also gets `sweep_results.csv`, a row per combination. Files are
replaced atomically, so a resumed run or a merge run again rewrites its own; a failure to write is a warning.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lerobot_hydra.core.durable import write_text_atomic
from lerobot_hydra.core.layout import RESULTS_CSV, SWEEP_CSV
from lerobot_hydra.loggers.base import LoggerConfig, RunMeta
from lerobot_hydra.results.aggregate import Results, Summary

log = logging.getLogger("lerobot_hydra")

RUN_COLUMNS = ["run", "job_type", "label"]
RATE_COLUMNS = ["n_episodes", "successes", "pc_success", "ci95_low", "ci95_high", "avg_sum_reward", "avg_max_reward"]
RESULT_COLUMNS = [*RUN_COLUMNS, "scope", "task_group", "task_id", "task_name", *RATE_COLUMNS]
SWEEP_COLUMNS = [
    "combination",
    "label",
    "arm",
    "seed",
    "num_shards",
    "n_episodes",
    "pc_success",
    "ci95_low",
    "ci95_high",
    "eval_s",
]


@dataclass
class CsvLoggerConfig(LoggerConfig):
    """No settings: the files go beside the results they hold."""

    def build(self) -> CsvLogger:
        return CsvLogger()


class CsvLogger:
    """Writes each result set as `results.csv` in its dir (an `ExperimentLogger`)."""

    def log_results(self, results: Results, out_dir: Path, run: RunMeta, images: dict[str, Path]) -> None:
        _write(out_dir / RESULTS_CSV, RESULT_COLUMNS, result_rows(results, run))

    def log_sweep(self, summary: dict[str, Any], out_dir: Path, run: RunMeta, images: dict[str, Path]) -> None:
        rows = [
            [*(row[k] for k in SWEEP_COLUMNS[:7]), *row["ci95_pc_success"], row["eval_s"]]
            for row in summary["combinations"]
        ]
        _write(out_dir / SWEEP_CSV, SWEEP_COLUMNS, rows)


def result_rows(results: Results, run: RunMeta) -> list[list[Any]]:
    """A row per task, per group and overall, each led by its run's name, job type and swept overrides."""
    head = [run.name, run.job_type, run.config.get("run", {}).get("label") or ""]
    rows = [[*head, "task", t.task_group, t.task_id, t.task_name, *_rates(t)] for t in results.tasks]
    rows += [[*head, "group", g.group, "", "", *_rates(g)] for g in results.groups]
    rows.append([*head, "overall", "", "", "", *_rates(results.overall)])
    return rows


def _rates(s: Summary) -> list[Any]:
    return [s.n_episodes, s.successes, s.pc_success, *s.ci95_pc_success, s.avg_sum_reward, s.avg_max_reward]


def _write(path: Path, columns: list[str], rows: Iterable[list[Any]]) -> None:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(["" if v is None else v for v in row] for row in rows)
    try:
        write_text_atomic(path, text.getvalue())
    except OSError as err:
        log.warning("%s could not be written (%s); the results are in eval_info.json", path, err)
        return
    log.info("CSV results: %s", path)
