"""Everything produced from aggregated results, for a single run, a shard and a merged sweep alike:
eval_info.json, the success plot, the console table and the experiment logger (W&B), in that order, so
that the files are on disk before anything is uploaded. Plots and loggers only ever warn."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lerobot_hydra.durable import write_json_atomic
from lerobot_hydra.errors import UserError
from lerobot_hydra.loggers import ExperimentLogger, RunMeta, build_logger, merged_run
from lerobot_hydra.results import format_table

log = logging.getLogger("lerobot_hydra")

EVAL_INFO_FILE = "eval_info.json"


def publish(
    info: dict[str, Any],
    out_dir: Path,
    title: str,
    *,
    logger: ExperimentLogger | None = None,
    run: RunMeta | None = None,
) -> None:
    """Write `eval_info.json` and `success_by_task.png` into `out_dir`, print the table, then log the results
    to `logger` as `run` (both or neither). Video paths in `info` are relative to `out_dir`."""
    write_json_atomic(out_dir / EVAL_INFO_FILE, info)
    _report(info, out_dir, f"{title} ({out_dir / EVAL_INFO_FILE})", logger, run)


def publish_shard(
    info: dict[str, Any],
    out_dir: Path,
    title: str,
    *,
    logger: ExperimentLogger | None = None,
    run: RunMeta | None = None,
) -> None:
    """A shard's partial results: plot, table and logger; the shard file, not eval_info.json, is its output."""
    _report(info, out_dir, title, logger, run)


def publish_merged(
    info: dict[str, Any],
    out_dir: Path,
    title: str,
    *,
    sweep_dir: Path,
    label: str = "",
    config: Mapping[str, Any] | None = None,
    num_shards: int | None = None,
) -> None:
    """`publish` for the merge of one combination (`label`, '' when only shards were swept) of the sweep in
    `sweep_dir`. With `config` (the combination's config, e.g. `loggers.saved_run_config(<a shard's dir>)`)
    whose `logger` names an experiment logger, the merge is logged as the sweep group's `merged` run, under
    an id derived from the sweep and label, so merging again updates that run instead of adding one."""
    logger = None
    if config is not None:
        try:
            logger = build_logger(config.get("logger"))
        except UserError as err:
            log.warning("the merged results are not logged: %s", err)
    run = merged_run(config, sweep_dir, label, num_shards) if logger is not None and config is not None else None
    publish(info, out_dir, title, logger=logger, run=run)


def publish_sweep(results: Sequence[tuple[str, dict[str, Any]]], sweep_dir: Path) -> Path | None:
    """`sweep_heatmap.png` in `sweep_dir`: success of each combination (label, merged info) on each task; only
    for a sweep of more than one combination. Returns its path, or None."""
    if len(results) < 2:
        return None
    from lerobot_hydra.plots import SWEEP_HEATMAP, sweep_heatmap

    try:
        path = sweep_heatmap(results, sweep_dir / SWEEP_HEATMAP)
    except Exception as err:  # noqa: BLE001 - a missing figure never costs the results
        log.warning("the sweep heatmap could not be drawn: %s", err)
        return None
    print(f"Sweep heatmap: {path}", flush=True)
    return path


def _report(
    info: dict[str, Any], out_dir: Path, title: str, logger: ExperimentLogger | None, run: RunMeta | None
) -> None:
    images = _plots(info, out_dir)
    print(format_table(info, title), flush=True)
    if images:
        print(f"Success plot: {images['success_by_task']}", flush=True)
    if logger is not None and run is not None:
        logger.log_results(info, out_dir, run, images)


def _plots(info: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    if not info["per_task"]:
        return {}
    from lerobot_hydra.plots import SUCCESS_PLOT, success_by_task

    try:
        return {"success_by_task": success_by_task(info, out_dir / SUCCESS_PLOT)}
    except ImportError as err:
        log.warning("no success plot: '%s' is not installed; reinstall with: pip install -e .", err.name)
        return {}
    except Exception as err:  # noqa: BLE001 - a missing figure never costs the results
        log.warning("the success plot could not be drawn: %s", err)
        return {}
