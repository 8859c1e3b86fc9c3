"""The Python API: evaluate a policy object in memory (a training loop's), with eval.py's config tree.

`evaluate(policy, overrides=[...])` runs one evaluation; an `Evaluator` keeps its worker processes, and the
simulators in them, between evaluations, so that the second and later ones start stepping at once. Both compose
the config as eval.py does (Hydra's compose API, the same validation and one-line errors) with `policy=live`,
and run it through the same run context and sources of work as eval.py (run/: the plan, sequential rounds,
recording), returning the same typed `Results`, every episode record included. A run dir is written only when
`out_dir` is given (one per evaluation, as eval.py writes it; videos and recordings need one).

The caller's torch state is left as it was: RNG states (torch, numpy, random), grad mode, the policy's
train/eval mode; the policy is not moved.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from lerobot_hydra.app.evaluation import evaluate_config
from lerobot_hydra.app.main_guard import check_main_guard
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.loggers.base import RunMeta, build_loggers
from lerobot_hydra.loggers.run_meta import EVAL, plain_config
from lerobot_hydra.policies.live import LivePolicy, LivePolicyConfig
from lerobot_hydra.results.aggregate import Results
from lerobot_hydra.rollout.build import build_run
from lerobot_hydra.run.pools import KeptPools
from lerobot_hydra.run.warm import Warm
from lerobot_hydra.schemas import schema as schemas
from lerobot_hydra.schemas.schema import EvalConfig, instantiate_node

log = logging.getLogger("lerobot_hydra")

LIVE = "policy=live"


def compose_live(overrides: Sequence[str]):  # noqa: ANN201 - a DictConfig (omegaconf imported lazily)
    """eval.py's config tree with `policy=live`; videos off unless asked for."""
    from lerobot_hydra.app.probing import compose

    for override in overrides:
        if override.lstrip("+~").split("=")[0] == "policy":
            raise UserError(f"'{override}': the policy is the object you pass; leave policy= out of the overrides")
    return compose(["eval.max_episodes_rendered=0", *overrides, LIVE])


def check_api_settings(eval_cfg: EvalConfig, out_dir: str | Path | None) -> None:
    """The settings the Python API cannot honour, each refused in one line naming the pair."""
    if out_dir is None and eval_cfg.max_episodes_rendered > 0:
        raise UserError("eval.max_episodes_rendered > 0 writes videos into a run dir: pass out_dir=<dir> too")
    if out_dir is None and eval_cfg.recording is not None:
        raise UserError("eval.recording writes a LeRobot dataset into a run dir: pass out_dir=<dir> too")
    if eval_cfg.claims == "dynamic":
        raise UserError(
            "eval.claims=dynamic shares a sweep's work between shard jobs (python eval.py -m ...); the Python API "
            "evaluates in this process: leave it out"
        )


def evaluate(
    policy: Any,
    overrides: Sequence[str] = (),
    *,
    preprocessor: Any = None,
    postprocessor: Any = None,
    out_dir: str | Path | None = None,
    step: int | None = None,
) -> Results:
    """One evaluation of `policy` (a LeRobot PreTrainedPolicy with its processors, or a lerobot_hydra `Policy`)
    with eval.py's `overrides`; its workers are closed when it returns (an `Evaluator` keeps them)."""
    check_main_guard("lerobot_hydra.evaluate")
    with Evaluator(overrides, out_dir=out_dir) as evaluator:
        return evaluator.evaluate(policy, preprocessor=preprocessor, postprocessor=postprocessor, step=step)


class Evaluator:
    """Evaluations of policy objects with one config, workers kept warm between them; `close()` (or leaving a
    `with` block) ends every worker."""

    def __init__(self, overrides: Sequence[str] = (), *, out_dir: str | Path | None = None) -> None:
        check_main_guard("lerobot_hydra.Evaluator")
        self.cfg = compose_live(overrides)
        self.eval_cfg = schemas.validate(self.cfg)
        check_api_settings(self.eval_cfg, out_dir)
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.loggers = build_loggers(self.cfg.get("logger"))
        self.env = instantiate_node(self.cfg.env)
        self.live = instantiate_node(self.cfg.policy)
        assert isinstance(self.live, LivePolicyConfig)
        self._pools = KeptPools()
        self._warm: Warm | None = None
        self._reads: Any = ()  # what the policy the parts were built for reads
        self._calls = 0
        self._closed = False

    def evaluate(
        self, policy: Any, *, preprocessor: Any = None, postprocessor: Any = None, step: int | None = None
    ) -> Results:
        """Every planned episode of `policy` (with `eval.sequential.stop`: its rounds); `step` (the trainer's)
        names the evaluation in loggers and run dirs."""
        if self._closed:
            raise UserError("this Evaluator is closed; make a new one")
        config = self.live.holding(LivePolicy.of(policy, preprocessor, postprocessor))  # this evaluation's only
        warm = self._warm_for(config)
        self._calls += 1
        name = f"step_{step:09d}" if step is not None else f"eval_{self._calls:03d}"
        out_dir = None if self.out_dir is None else self.out_dir / name
        with caller_state_kept(policy):
            results = evaluate_config(
                self.cfg, self.eval_cfg, out_dir, "api", warm=warm, run_meta=lambda: self.run_meta(step, out_dir)
            )
        log.info(
            "evaluation%s: %s%% success over %d episodes",
            "" if step is None else f" at step {step}",
            results.overall.pc_success,
            results.overall.n_episodes,
        )
        return results

    def _warm_for(self, config: LivePolicyConfig) -> Warm:
        """What is kept warm, for one evaluation with `config` as its policy (the kept one never holds the caller's
        policy); the parts are rebuilt (and the workers restarted) only when a policy reads other observations."""
        reads = config.reads(self.env)
        if self._warm is None or reads != self._reads:
            self._pools.clear()
            parts = build_run(self.cfg, policy=config, env=self.env)
            self._warm = Warm(dataclasses.replace(parts, policy=self.live), self.loggers, self._pools)
            self._reads = reads
        return dataclasses.replace(self._warm, parts=dataclasses.replace(self._warm.parts, policy=config))

    def run_meta(self, step: int | None, out_dir: Path | None) -> RunMeta:
        config = {**plain_config(self.cfg), "step": step, "out_dir": None if out_dir is None else str(out_dir)}
        detail = "" if step is None else f"step {step}"
        key = f"api|{id(self)}|{self._calls}" if out_dir is None else f"{out_dir.resolve()}|api"
        return RunMeta(EVAL, key, "evaluate", detail, None, config, step=step)

    def close(self) -> None:
        """Ends every worker and the servers that start them; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pools.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed:
                self._pools.close()  # an Evaluator dropped without close(): its workers end with it
        except Exception:  # noqa: BLE001, S110 - nothing to report to at garbage collection
            pass


@contextlib.contextmanager
def caller_state_kept(policy: Any) -> Iterator[None]:
    """`policy` in eval mode (as a loaded checkpoint is) inside; outside, the RNG states, grad mode and every
    module's train/eval mode as they were."""
    import numpy as np

    torch = sys.modules.get("torch")
    py_state, np_state = random.getstate(), np.random.get_state()
    saved: list[Any] = []
    if torch is not None:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        saved = [torch.get_rng_state(), cuda, torch.is_grad_enabled()]
    modes = [(m, m.training) for m in policy.modules()] if callable(getattr(policy, "modules", None)) else []
    try:
        if modes:
            policy.eval()
        yield
    finally:
        for module, training in modes:
            module.training = training
        random.setstate(py_state)
        np.random.set_state(np_state)
        if torch is not None:
            torch.set_rng_state(saved[0])
            if saved[1] is not None:
                torch.cuda.set_rng_state_all(saved[1])
            torch.set_grad_enabled(saved[2])
