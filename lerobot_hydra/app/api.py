"""The Python API: evaluate a policy object in memory (a training loop's), with eval.py's config tree.

`evaluate(policy, overrides=[...])` runs one evaluation; an `Evaluator` keeps its worker processes, and the
simulators in them, between evaluations, so that the second and later ones start stepping at once. Both compose
the config as eval.py does (Hydra's compose API, the same validation and one-line errors) with `policy=live`,
run the same plan, lanes and workers, and return the same typed `Results`, every episode record included. A run
dir is written only when `out_dir` is given (one per evaluation, as eval.py writes it; videos need one).

The caller's torch state is left as it was: RNG states (torch, numpy, random), grad mode, the policy's
train/eval mode; the policy is not moved.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from lerobot_hydra.config import schema as schemas
from lerobot_hydra.config.schema import instantiate_node
from lerobot_hydra.config.validation import check_shards_have_work
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import EpisodeRecord, sort_records
from lerobot_hydra.loggers.base import RunMeta, build_loggers
from lerobot_hydra.loggers.run_meta import EVAL, plain_config
from lerobot_hydra.policies.live import LivePolicy, LivePolicyConfig
from lerobot_hydra.results.aggregate import Results, aggregate
from lerobot_hydra.rollout.build import RunParts, build_run
from lerobot_hydra.rollout.lanes import WarmPools
from lerobot_hydra.rollout.lanes import evaluate as run_lanes
from lerobot_hydra.rollout.plan import shard_plan
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.provenance import collect as collect_provenance
from lerobot_hydra.rollout.runner import TaskWork
from lerobot_hydra.vector.faults import WorkerFaults, using_worker_faults
from lerobot_hydra.vector.task_envs import prestart_workers, stop_worker_servers

log = logging.getLogger("lerobot_hydra")

LIVE = "policy=live"


def compose_live(overrides: Sequence[str]):  # noqa: ANN201 - a DictConfig (omegaconf imported lazily)
    """eval.py's config tree with `policy=live`; videos off unless asked for."""
    from lerobot_hydra.app.probing import compose

    for override in overrides:
        if override.lstrip("+~").split("=")[0] == "policy":
            raise UserError(f"'{override}': the policy is the object you pass; leave policy= out of the overrides")
    return compose(["eval.max_episodes_rendered=0", *overrides, LIVE])


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
    with Evaluator(overrides, out_dir=out_dir) as evaluator:
        return evaluator.evaluate(policy, preprocessor=preprocessor, postprocessor=postprocessor, step=step)


class Evaluator:
    """Evaluations of policy objects with one config, workers kept warm between them; `close()` (or leaving a
    `with` block) ends every worker."""

    def __init__(self, overrides: Sequence[str] = (), *, out_dir: str | Path | None = None) -> None:
        self.cfg = compose_live(overrides)
        self.eval_cfg = schemas.validate(self.cfg)
        if self.eval_cfg.max_episodes_rendered > 0 and out_dir is None:
            raise UserError("eval.max_episodes_rendered > 0 writes videos into a run dir: pass out_dir=<dir> too")
        if self.eval_cfg.record is not None:
            raise UserError("eval.record records rollouts of the lerobot-hydra-eval command only; unset it here")
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.loggers = build_loggers(self.cfg.get("logger"))
        self.env = instantiate_node(self.cfg.env)
        self.live = instantiate_node(self.cfg.policy)
        assert isinstance(self.live, LivePolicyConfig)
        self._warm = WarmPools()
        self._parts: RunParts | None = None
        self._reads: Any = ()  # what the policy the parts were built for reads
        self._calls = 0
        self._closed = False

    def evaluate(
        self, policy: Any, *, preprocessor: Any = None, postprocessor: Any = None, step: int | None = None
    ) -> Results:
        """Every planned episode of `policy`; `step` (the trainer's) names the evaluation in loggers and run dirs."""
        if self._closed:
            raise UserError("this Evaluator is closed; make a new one")
        self.live.live = LivePolicy.of(policy, preprocessor, postprocessor)
        try:
            parts = self._run_parts()
            self._calls += 1
            if self.out_dir is None:
                results = self._in_memory(parts, step)
            else:
                name = f"step_{step:09d}" if step is not None else f"eval_{self._calls:03d}"
                results = self._into_run_dir(parts, self.out_dir / name, step)
        finally:
            self.live.live = None  # the trainer's policy is not kept between evaluations
        log.info(
            "evaluation%s: %s%% success over %d episodes",
            "" if step is None else f" at step {step}",
            results.overall.pc_success,
            results.overall.n_episodes,
        )
        return results

    def _run_parts(self) -> RunParts:
        """The run's parts, rebuilt (and the workers restarted) only when a policy reads other observations."""
        reads = self.live.reads(self.env)
        if self._parts is None or reads != self._reads:
            self._warm.close()
            self._parts = build_run(self.cfg, policy=self.live, env=self.env)
            self._reads = reads
            if self.eval_cfg.use_async_envs and self.eval_cfg.batch_size > 1:
                prestart_workers(self._parts.run_env)
        return self._parts

    def work(self, parts: RunParts) -> list[TaskWork]:
        """Every planned episode of this shard (`eval.num_shards`; one shard by default)."""
        ev = self.eval_cfg
        num_shards = ev.num_shards or 1
        check_shards_have_work(len(parts.tasks) * ev.n_episodes, num_shards, len(parts.tasks), ev.n_episodes)
        by_key = {t.key: t for t in parts.tasks}
        plan = shard_plan([t.key for t in parts.tasks], ev.n_episodes, ev.shard_id, num_shards)
        return [TaskWork(by_key[b.key], list(b.episodes)) for b in plan]

    def provenance(self, parts: RunParts) -> dict[str, Any]:
        return collect_provenance(parts.env, parts.policy, None, self.cfg.device)

    def run(self, parts: RunParts, work: list[TaskWork], on_record: Any, videos: Any = None) -> None:
        """The lanes over warm workers, the caller's torch state kept."""
        from lerobot_hydra.app.evaluation import lane_settings

        settings = lane_settings(self.cfg, self.eval_cfg, parts, render=videos is not None)
        assert self.live.live is not None
        progress = Progress(self.eval_cfg.progress_interval_s)
        try:
            faults = WorkerFaults(self.eval_cfg.step_timeout_s, self.eval_cfg.worker_retries)
            with caller_state_kept(self.live.live.policy), using_worker_faults(faults):
                run_lanes(settings, work, parts.build_policy, on_record, progress, videos, make_pools=self._warm)
        except BaseException:
            self._warm.close()  # workers stopped mid-episode or failed: none is reused
            raise

    def run_meta(self, step: int | None, out_dir: Path | None) -> RunMeta:
        config = {**plain_config(self.cfg), "step": step, "out_dir": None if out_dir is None else str(out_dir)}
        detail = "" if step is None else f"step {step}"
        key = f"api|{id(self)}|{self._calls}"
        return RunMeta(EVAL, key, "evaluate", detail, None, config, step=step)

    def _in_memory(self, parts: RunParts, step: int | None) -> Results:
        records: list[EpisodeRecord] = []
        started = time.monotonic()
        self.run(parts, self.work(parts), records.append)
        ordered = sort_records(records, [t.key for t in parts.tasks])
        results = aggregate(ordered, time.monotonic() - started, self.provenance(parts), complete=True)
        run = self.run_meta(step, None)
        for logger in self.loggers:  # W&B files, for a new run, under the working directory as wandb.init puts them
            logger.log_results(results, Path.cwd(), run, {})
        return results

    def _into_run_dir(self, parts: RunParts, out_dir: Path, step: int | None) -> Results:
        """Written as eval.py writes a run dir (episodes.jsonl, the shard file, eval_info.json, the table, the
        plot, the report page, videos), then logged."""
        from lerobot_hydra.app.evaluation import run_identity, video_recorder
        from lerobot_hydra.outputs.publish import publish
        from lerobot_hydra.outputs.video import without_missing_videos
        from lerobot_hydra.rundir.store import RunStore

        ev = self.eval_cfg
        num_shards = ev.num_shards or 1
        work = self.work(parts)
        plan = shard_plan([t.key for t in parts.tasks], ev.n_episodes, ev.shard_id, num_shards)
        identity, provenance = run_identity(self.cfg, ev), self.provenance(parts)
        with RunStore(out_dir, identity, ev.shard_id, num_shards, parts.tasks, plan, "api", provenance) as store:
            videos = video_recorder(ev, parts.env, work, out_dir)
            try:
                self.run(parts, work, store.add, videos)
            finally:
                if videos is not None:
                    videos.close()
                store.records[:] = without_missing_videos(store.records, out_dir)
                store.write()
            results = aggregate(store.sorted_records(), store.eval_s, store.provenance, store.complete)
            run = dataclasses.replace(self.run_meta(step, out_dir), key=f"{out_dir.resolve()}|api")
            publish(results, out_dir, "Evaluation results", loggers=self.loggers, run=run)
        return results

    def close(self) -> None:
        """Ends every worker and the servers that start them; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._warm.close()
        stop_worker_servers()
        self.live.live = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._warm.close()  # an Evaluator dropped without close(): its workers end with it
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
