"""Everything produced from aggregated results, for a single run, a shard and a merged sweep alike:
eval_info.json, the success plot, the console table, report.html (not for shards) and the experiment logger
(W&B), in that order, so that the files are on disk before anything is uploaded. Plots, pages and loggers only
ever warn."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lerobot_hydra.core.durable import write_json_atomic
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.results.aggregate import format_table
from lerobot_hydra.sinks import report
from lerobot_hydra.sinks.loggers import ExperimentLogger, RunMeta, build_logger, merged_run, sweep_run

log = logging.getLogger("lerobot_hydra")

EVAL_INFO_FILE = "eval_info.json"


def publish(
    info: dict[str, Any],
    out_dir: Path,
    title: str,
    *,
    logger: ExperimentLogger | None = None,
    run: RunMeta | None = None,
    quick: bool = False,
) -> None:
    """Write `eval_info.json` and `success_by_task.png` into `out_dir`, print the table, then log the results
    to `logger` as `run` (both or neither). Video paths in `info` are relative to `out_dir`. `quick` (a stopped
    run, which SLURM kills soon): eval_info and the table only."""
    write_json_atomic(out_dir / EVAL_INFO_FILE, info)
    _report(info, out_dir, f"{title} ({out_dir / EVAL_INFO_FILE})", logger, run, None if quick else title, quick)


def publish_shard(
    info: dict[str, Any],
    out_dir: Path,
    title: str,
    *,
    logger: ExperimentLogger | None = None,
    run: RunMeta | None = None,
    quick: bool = False,
) -> None:
    """A shard's partial results: plot, table and logger; the shard file, not eval_info.json, is its output."""
    _report(info, out_dir, title, logger, run, quick=quick)


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
    logger = _config_logger(config)
    run = merged_run(config, sweep_dir, label, num_shards) if logger is not None and config is not None else None
    publish(info, out_dir, title, logger=logger, run=run)


def publish_sweep(
    results: Sequence[tuple[str, dict[str, Any]]],
    sweep_dir: Path,
    summary: dict[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> Path | None:
    """For a sweep of more than one combination (label, merged info): `sweep_heatmap.png` in `sweep_dir`, and
    with its `summary` (summary.sweep_summary) the forest plot of its comparisons, its report.html and, when
    `config` (a combination's config) names an experiment logger, the sweep's W&B run. Returns the heatmap's
    path, or None."""
    if len(results) < 2:
        return None
    from lerobot_hydra.sinks import plots

    images = {}
    heatmap = _draw("the sweep heatmap", plots.sweep_heatmap, results, sweep_dir / plots.SWEEP_HEATMAP)
    if heatmap is not None:
        images["sweep_heatmap"] = heatmap
        print(f"Sweep heatmap: {heatmap}", flush=True)
    if summary is None:
        return heatmap
    if summary["comparisons"]:
        path = sweep_dir / plots.COMPARISON_PLOT
        forest = _draw(
            "the comparison plot", plots.comparison_forest, summary["comparisons"], summary["baseline"], path
        )
        if forest is not None:
            images["comparison_forest"] = forest
            print(f"Comparison plot: {forest}", flush=True)
    _page("the sweep", report.sweep_report, summary, sweep_dir, images)
    logger = _config_logger(config)
    if logger is not None and config is not None:
        logger.log_sweep(summary, sweep_dir, sweep_run(config, sweep_dir, summary), images)
    return heatmap


def _config_logger(config: Mapping[str, Any] | None) -> ExperimentLogger | None:
    """The experiment logger a saved run config names, if any (bad settings: a warning)."""
    if config is None:
        return None
    try:
        return build_logger(config.get("logger"))
    except UserError as err:
        log.warning("the merged results are not logged: %s", err)
        return None


def _draw(what: str, draw: Callable[..., Path], *args: Any) -> Path | None:
    try:
        return draw(*args)
    except Exception as err:  # noqa: BLE001 - a missing figure never costs the results
        log.warning("%s could not be drawn: %s", what, err)
        return None


def _page(what: str, write: Callable[..., Path], *args: Any) -> None:
    try:
        path = write(*args)
    except Exception as err:  # noqa: BLE001 - a missing page never costs the results
        log.warning("the report page of %s could not be written: %s", what, err)
        return
    print(f"Report: {path}", flush=True)


def _report(
    info: dict[str, Any],
    out_dir: Path,
    title: str,
    logger: ExperimentLogger | None,
    run: RunMeta | None,
    page_title: str | None = None,
    quick: bool = False,
) -> None:
    """Plot (unless `quick`), table, report page (with `page_title`) and logger."""
    images = {} if quick else _plots(info, out_dir)
    print(format_table(info, title), flush=True)
    if images:
        print(f"Success plot: {images['success_by_task']}", flush=True)
    if page_title is not None:
        _page(str(out_dir), report.run_report, info, out_dir, page_title, images)
    if logger is not None and run is not None:
        logger.log_results(info, out_dir, run, images)


def _plots(info: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    if not info["per_task"]:
        return {}
    from lerobot_hydra.sinks.plots import SUCCESS_PLOT, success_by_task

    try:
        return {"success_by_task": success_by_task(info, out_dir / SUCCESS_PLOT)}
    except ImportError as err:
        log.warning("no success plot: '%s' is not installed; reinstall with: pip install -e .", err.name)
        return {}
    except Exception as err:  # noqa: BLE001 - a missing figure never costs the results
        log.warning("the success plot could not be drawn: %s", err)
        return {}
