"""The one way to evaluate a composed, validated config: eval.py and sweep jobs (app/main.py), the sequential
sweeper's rounds (their jobs), the Python API (app/api.py) and the paired comparison (app/paired_sequential.py)
all call `evaluate_config`. It opens the run context (run/context.py) over what is kept warm (run/warm.py: the
caller's, or one of its own), feeds it the source of work its settings ask for (run/sources/), then concludes and
publishes it (run/execute.py)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from omegaconf import DictConfig

from lerobot_hydra.loggers.base import RunMeta
from lerobot_hydra.results.aggregate import Results
from lerobot_hydra.run.context import RunContext, open_run
from lerobot_hydra.run.execute import WorkSource, execute
from lerobot_hydra.run.sources import source_for
from lerobot_hydra.run.warm import Warm
from lerobot_hydra.schemas.schema import EvalConfig


def evaluate_config(
    cfg: DictConfig,
    eval_cfg: EvalConfig,
    out_dir: Path | None,
    label: str,
    *,
    warm: Warm | None = None,
    source: Callable[[RunContext], WorkSource] = source_for,
    on_locked: Callable[[], None] | None = None,
    run_meta: Callable[[], RunMeta] | None = None,
) -> Results:
    """The run of `cfg` in `out_dir` (None: in memory) over `warm` (the caller's to close; None: this run's own),
    fed by `source(run)` (a sequential sweep's job: its round's; the paired comparison: both sides' rounds).
    `on_locked` runs once this process holds `out_dir` and its identity check passed (it saves `.hydra/`);
    `run_meta`: what loggers log the run under (the Python API's step)."""
    with ExitStack() as stack:
        if warm is None:
            warm = stack.enter_context(Warm.opened(cfg))
        run = stack.enter_context(open_run(cfg, eval_cfg, out_dir, label, warm, on_locked=on_locked, run_meta=run_meta))
        return execute(run, source(run))
