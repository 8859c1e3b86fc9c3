"""Everything produced from typed results, for a single run, a shard and a merged sweep alike:
eval_info.json, the success plot, the console table, report.html (not for shards) and the experiment loggers
(`logger.*`), in that order, so that the files are on disk before anything is uploaded. Plots, pages and loggers
only ever warn, and a logger that fails never keeps the others from logging."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lerobot_hydra.core.durable import write_json_atomic
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.layout import (
    COMPARISON_PLOT,
    EVAL_INFO_FILE,
    LATENCY_PLOT,
    STEPS_PLOT,
    SUCCESS_PLOT,
    SWEEP_HEATMAP,
)
from lerobot_hydra.loggers.base import ExperimentLogger, RunMeta, build_loggers
from lerobot_hydra.loggers.run_meta import merged_run, sweep_run
from lerobot_hydra.publish import report
from lerobot_hydra.results.aggregate import Results
from lerobot_hydra.results.eval_info import to_eval_info
from lerobot_hydra.results.table import format_table

log = logging.getLogger("lerobot_hydra")


def publish(
    results: Results,
    out_dir: Path,
    title: str,
    *,
    loggers: Sequence[ExperimentLogger] = (),
    run: RunMeta | None = None,
    quick: bool = False,
) -> None:
    """Write `eval_info.json` and `success_by_task.png` into `out_dir`, print the table, then log the results
    to `loggers` as `run` (needed with loggers). Video paths in `results` are relative to `out_dir`. `quick` (a
    stopped run, which SLURM kills soon): eval_info and the table only."""
    write_json_atomic(out_dir / EVAL_INFO_FILE, to_eval_info(results))
    _report(results, out_dir, f"{title} ({out_dir / EVAL_INFO_FILE})", loggers, run, None if quick else title, quick)


def publish_shard(
    results: Results,
    out_dir: Path,
    title: str,
    *,
    loggers: Sequence[ExperimentLogger] = (),
    run: RunMeta | None = None,
    quick: bool = False,
) -> None:
    """A shard's partial results: plot, table and loggers; the shard file, not eval_info.json, is its output."""
    _report(results, out_dir, title, loggers, run, quick=quick)


def publish_merged(
    results: Results,
    out_dir: Path,
    title: str,
    *,
    sweep_dir: Path,
    label: str = "",
    config: Mapping[str, Any] | None = None,
    num_shards: int | None = None,
) -> None:
    """`publish` for the merge of one combination (`label`, '' when only shards were swept) of the sweep in
    `sweep_dir`. With `config` (the combination's config, e.g. `loggers.run_meta.saved_run_config(<a shard's dir>)`)
    whose `logger` names experiment loggers, the merge is logged as the sweep group's `merged` run, under
    an id derived from the sweep and label, so merging again updates that run instead of adding one."""
    loggers = _config_loggers(config)
    run = merged_run(config, sweep_dir, label, num_shards) if loggers and config is not None else None
    publish(results, out_dir, title, loggers=loggers, run=run)


def publish_sweep(
    results: Sequence[tuple[str, Results]],
    sweep_dir: Path,
    summary: dict[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> Path | None:
    """For a sweep of more than one combination (label, merged results): `sweep_heatmap.png` in `sweep_dir`, and
    with its `summary` (summary.sweep_summary) the forest plot of its comparisons, its latency curve, its
    report.html and, when `config` (a combination's config) names experiment loggers, the sweep's run in each.
    Returns the heatmap's path, or None."""
    if len(results) < 2:
        return None
    from lerobot_hydra.publish import plots

    images = {}
    heatmap = _draw("the sweep heatmap", plots.sweep_heatmap, results, sweep_dir / SWEEP_HEATMAP)
    if heatmap is not None:
        images["sweep_heatmap"] = heatmap
        print(f"Sweep heatmap: {heatmap}", flush=True)
    if summary is None:
        return heatmap
    named = [(label, result.episodes) for label, result in results]
    if any(r.success for _, records in named for r in records):
        steps = _draw("the steps plot", plots.steps_cdf, named, sweep_dir / STEPS_PLOT)
        images.update({"steps_cdf": steps} if steps is not None else {})
    if summary["comparisons"]:
        path = sweep_dir / COMPARISON_PLOT
        forest = _draw(
            "the comparison plot", plots.comparison_forest, summary["comparisons"], summary["baseline"], path
        )
        if forest is not None:
            images["comparison_forest"] = forest
            print(f"Comparison plot: {forest}", flush=True)
    if summary.get("latency_curves"):
        curve = _draw("the latency curve", plots.latency_curve, summary["latency_curves"], sweep_dir / LATENCY_PLOT)
        if curve is not None:
            images["latency_curve"] = curve
            print(f"Latency curve: {curve}", flush=True)
    _page("the sweep", report.sweep_report, summary, sweep_dir, images)
    loggers = _config_loggers(config)
    if loggers and config is not None:
        run = sweep_run(config, sweep_dir, summary)
        for logger in loggers:
            _safely(logger, logger.log_sweep, summary, sweep_dir, run, images)
    return heatmap


def _config_loggers(config: Mapping[str, Any] | None) -> list[ExperimentLogger]:
    """The experiment loggers a saved run config names (bad settings: a warning, and none)."""
    if config is None:
        return []
    try:
        return build_loggers(config.get("logger"))
    except UserError as err:
        log.warning("the merged results are not logged: %s", err)
        return []


def _safely(logger: ExperimentLogger, log_call: Callable[..., None], *args: Any) -> None:
    """A logger's call; one that raises despite its contract is a warning, so the next logger still logs."""
    try:
        log_call(*args)
    except Exception as err:  # noqa: BLE001 - a logger never costs the results or the other loggers
        log.warning(
            "the logger %s failed (%s: %s); the results are on disk", type(logger).__name__, type(err).__name__, err
        )


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
    results: Results,
    out_dir: Path,
    title: str,
    loggers: Sequence[ExperimentLogger],
    run: RunMeta | None,
    page_title: str | None = None,
    quick: bool = False,
) -> None:
    """Plot (unless `quick`), table, report page (with `page_title`) and loggers."""
    images = {} if quick else _plots(results, out_dir)
    print(format_table(results, title), flush=True)
    if images:
        print(f"Success plot: {images['success_by_task']}", flush=True)
    if page_title is not None:
        _page(str(out_dir), report.run_report, results, out_dir, page_title, images)
    for logger in loggers if run is not None else ():
        _safely(logger, logger.log_results, results, out_dir, run, images)


def _plots(results: Results, out_dir: Path) -> dict[str, Path]:
    if not results.tasks:
        return {}
    from lerobot_hydra.publish.plots import steps_cdf, success_by_task

    try:
        images = {"success_by_task": success_by_task(results, out_dir / SUCCESS_PLOT)}
        if any(r.success for r in results.episodes):
            images["steps_cdf"] = steps_cdf([("this run", results.episodes)], out_dir / STEPS_PLOT)
        return images
    except ImportError as err:
        log.warning("no success plot: '%s' is not installed; reinstall with: pip install -e .", err.name)
        return {}
    except Exception as err:  # noqa: BLE001 - a missing figure never costs the results
        log.warning("the success plot could not be drawn: %s", err)
        return {}
