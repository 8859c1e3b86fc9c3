"""The run context: a run's resources, opened once from the validated config and closed once, whatever feeds it.

It owns the run's parts (env, policy config, tasks, processors), the policy (built at the first batch of work, then
kept; told once, at the run's true end, that the run is over), the env pools (kept warm from batch to batch: rounds,
claimed blocks, the Python API's evaluations), the sink of its records (the run dir's store, or memory), the rollout
recorder (`eval.recording`), the videos and the loggers. `run` is the one way to run a batch of work, `end` and
`publish` the one way to end it (run/execute.py feeds a run from a source of work and concludes it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from lerobot_hydra.core.records import EpisodeKey, EpisodeRecord
from lerobot_hydra.loggers.base import ExperimentLogger, RunMeta
from lerobot_hydra.policies.base import Policy
from lerobot_hydra.publish.recording import DatasetRecorder, recording
from lerobot_hydra.publish.video import VideoRecorder
from lerobot_hydra.results.aggregate import Results
from lerobot_hydra.rollout.build import RunParts
from lerobot_hydra.rollout.health import Health
from lerobot_hydra.rollout.lanes import LaneSettings, evaluate
from lerobot_hydra.rollout.plan import TaskBlock, TaskWork
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.provenance import collect as collect_provenance
from lerobot_hydra.rollout.runner import OnRecord
from lerobot_hydra.rollout.signals import RunInterrupted
from lerobot_hydra.run.identity import run_identity
from lerobot_hydra.run.pools import KeptPools
from lerobot_hydra.run.sink import DirSink, MemorySink, Publication, RecordSink
from lerobot_hydra.run.warm import Warm
from lerobot_hydra.run.work import planned_for
from lerobot_hydra.schemas.schema import EvalConfig
from lerobot_hydra.vector.faults import WorkerFaults
from lerobot_hydra.vector.task_envs import has_workers

log = logging.getLogger("lerobot_hydra")


class RunContext:
    def __init__(
        self,
        cfg: DictConfig,
        eval_cfg: EvalConfig,
        parts: RunParts,
        sink: RecordSink,
        *,
        label: str,
        plan: list[TaskBlock],
        loggers: list[ExperimentLogger],
        pools: KeptPools,
        recorder: DatasetRecorder | None = None,
        run_meta: Callable[[], RunMeta] | None = None,
        identity: dict[str, Any] | None = None,
    ) -> None:
        self.identity = identity  # the run's fingerprinted identity (None in memory)
        self.cfg, self.eval_cfg, self.parts, self.sink, self.label = cfg, eval_cfg, parts, sink, label
        self.plan = plan  # this run's (shard's) planned episodes; a dynamic shard's: the whole run's
        self.loggers, self.pools, self.recorder, self.run_meta = loggers, pools, recorder, run_meta
        self.faults = WorkerFaults(eval_cfg.step_timeout_s, eval_cfg.worker_retries, eval_cfg.on_error)
        self.built: Policy | None = None
        self._building = threading.Lock()
        self.health = Health()  # unhealthy tasks and shards, from this session's records

    @property
    def out_dir(self) -> Path | None:
        return self.sink.out_dir

    @property
    def num_shards(self) -> int:
        return self.eval_cfg.num_shards or 1

    def policy(self) -> Policy:
        """The run's policy, built at the first call (while the first batch's workers start) and kept."""
        with self._building:
            if self.built is None:
                self.built = self.parts.build_policy()
            return self.built

    def record(self, record: EpisodeRecord) -> None:
        """Where a finished episode goes: the sink, and the recorder (which writes an episode's steps once); then
        raises if the session's records say a task or the run is unhealthy (rollout/health.py)."""
        self.sink.add(record)
        if self.recorder is not None and not record.errored:
            self.recorder.write(record)
        self.health.recorded(record)

    def lost_steps(self) -> set[EpisodeKey]:
        """Recorded episodes whose steps a killed session lost: they run again, for their steps only."""
        return self.recorder.missing(self.sink.done()) if self.recorder is not None else set()

    def run(self, work: list[TaskWork], record: OnRecord | None = None) -> None:
        """Runs `work` on the run's policy and kept pools, every record to `record` (default: `self.record`).
        Raises RunInterrupted when a stop signal arrives; any other failure also closes the pools (workers stopped
        mid-episode are not reused)."""
        work = [w for w in work if w.episodes]
        if not work:
            return
        videos = self._videos(work)
        try:
            evaluate(
                self._lanes(render=videos is not None),
                work,
                self.policy,
                record or self.record,
                Progress(self.eval_cfg.progress_interval_s),
                videos,
                make_pools=self.pools,
            )
        except RunInterrupted:
            raise
        except BaseException:
            self.pools.clear()
            raise
        finally:
            if videos is not None:
                videos.close()

    def _lanes(self, render: bool) -> LaneSettings:
        p, ev = self.parts, self.eval_cfg
        return LaneSettings(
            p.run_env,
            p.env_pre,
            p.env_post,
            base_seed=self.cfg.seed,
            batch_size=ev.batch_size,
            use_async=ev.use_async_envs,
            max_parallel_tasks=ev.max_parallel_tasks,
            render=render,
            mixes_tasks=p.policy.resets_rows(),
            skip_unread=ev.render == "read",
            faults=self.faults,
            recorder=self.recorder,
        )

    def _videos(self, work: list[TaskWork]) -> VideoRecorder | None:
        """A video recorder when some episode of `work` is among the first `max_episodes_rendered` of its task (and
        the run has a dir); envs are created with rendering only then."""
        wanted = self.eval_cfg.max_episodes_rendered
        if self.out_dir is None or not any(k < wanted for w in work for k in w.episodes):
            return None
        return VideoRecorder(self.out_dir, self.parts.env.fps, wanted)

    def end(self, final: bool, complete: bool, stops: dict[Any, int]) -> None:
        """The policy told once (`final`: the run's true end; else it only lets go), then the sink's last state."""
        if self.built is not None:
            if final:
                self.built.finish()
            else:
                close = getattr(self.built, "close", None)  # a user's policy object may predate `Policy.close`
                if callable(close):
                    close()
        elif final and complete:
            self.parts.policy.completed_unbuilt()
        self.sink.drop_missing_videos()
        self.sink.write(complete, stops)

    def publish(self, results: Results, interrupted: RunInterrupted | None, planned: int) -> None:
        """The results published by the sink (run/sink.py: into the run dir, or only to the loggers)."""
        self.sink.publish(results, Publication(self.loggers, self.run_meta, interrupted, planned))


@contextmanager
def open_run(
    cfg: DictConfig,
    eval_cfg: EvalConfig,
    out_dir: Path | None,
    label: str,
    warm: Warm,
    *,
    on_locked: Callable[[], None] | None = None,
    run_meta: Callable[[], RunMeta] | None = None,
) -> Iterator[RunContext]:
    """The context of the run of `cfg` in `out_dir` (None: records in memory), closed on leaving, over the parts,
    loggers and pools of `warm` (its owner's to close). `on_locked` runs once this process holds `out_dir` and its
    identity check passed (eval.py saves `.hydra/`)."""
    parts, pools = warm.parts, warm.pools
    plan = planned_for(parts, eval_cfg)
    checkpoint = parts.policy.identity()
    provenance = collect_provenance(parts.env, parts.policy, checkpoint, cfg.device)
    with ExitStack() as stack:
        sink: RecordSink
        identity = None
        if out_dir is None:
            sink = MemorySink([t.key for t in parts.tasks], plan, provenance)
        else:
            identity = run_identity(cfg, eval_cfg, checkpoint, provenance.get("simulator"))
            shard_id, num_shards = eval_cfg.shard_id, eval_cfg.num_shards or 1
            sink = DirSink(cfg, out_dir, identity, shard_id, num_shards, parts.tasks, plan, label, provenance)
            stack.enter_context(sink)
        recorder = None
        if out_dir is not None:
            recorder = stack.enter_context(recording(eval_cfg, parts.env, parts.tasks, out_dir))
        if on_locked is not None:
            on_locked()
        if has_workers(parts.run_env, eval_cfg.batch_size, eval_cfg.use_async_envs):
            pools.prestart(parts.run_env)
        yield RunContext(
            cfg,
            eval_cfg,
            parts,
            sink,
            label=label,
            plan=plan,
            loggers=warm.loggers,
            pools=pools,
            recorder=recorder,
            run_meta=run_meta,
            identity=identity,
        )
