"""One evaluation run of a composed, validated config: its run context (run/context.py) fed by the source of work
its settings ask for (run/sources/), then concluded and published."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from lerobot_hydra.config.schema import EvalConfig
from lerobot_hydra.results.aggregate import Results
from lerobot_hydra.run.context import open_run
from lerobot_hydra.run.execute import execute
from lerobot_hydra.run.sources import source_for
from lerobot_hydra.run.work import RoundCap


def evaluate_config(
    cfg: DictConfig,
    eval_cfg: EvalConfig,
    out_dir: Path,
    label: str,
    on_locked: Callable[[], None] | None = None,
    cap: RoundCap | None = None,
) -> Results:
    """The run of `cfg` in `out_dir`; `cap`: the round a sequential sweep's job runs. `on_locked` runs once this
    process holds `out_dir` and its identity check passed (it saves `.hydra/`)."""
    with open_run(cfg, eval_cfg, out_dir, label, on_locked=on_locked) as run:
        return execute(run, source_for(run, cap))
