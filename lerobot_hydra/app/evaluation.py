"""One evaluation run: build its parts (rollout/build.py) -> plan this shard's work (resuming what is recorded) ->
run the lanes -> publish the files, the table and the loggers."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lerobot_hydra.app.claimed import run_claimed
from lerobot_hydra.app.sequential import run_rounds
from lerobot_hydra.config.schema import EvalConfig, resolve_target
from lerobot_hydra.config.validation import check_sequential, check_shards_have_work
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.loggers.base import ExperimentLogger, build_loggers
from lerobot_hydra.loggers.run_meta import shard_run, single_run
from lerobot_hydra.outputs.publish import publish, publish_shard
from lerobot_hydra.outputs.recording import DatasetRecorder, recording
from lerobot_hydra.outputs.video import VideoRecorder, without_missing_videos
from lerobot_hydra.policies.base import Policy
from lerobot_hydra.results.aggregate import Results, aggregate
from lerobot_hydra.rollout.build import RunParts, build_run
from lerobot_hydra.rollout.lanes import LaneSettings, MakePools, evaluate
from lerobot_hydra.rollout.plan import TaskBlock, plan_size, shard_plan
from lerobot_hydra.rollout.progress import Progress
from lerobot_hydra.rollout.provenance import collect as collect_provenance
from lerobot_hydra.rollout.runner import OnRecord, TaskWork
from lerobot_hydra.rollout.stopping import RunInterrupted
from lerobot_hydra.rundir.store import RunStore
from lerobot_hydra.vector.faults import WorkerFaults, using_worker_faults
from lerobot_hydra.vector.task_envs import prestart_workers, stop_worker_servers

log = logging.getLogger("lerobot_hydra")

# Settings that never change an episode's outcome; left out of the fingerprint so that a shard can be
# resumed with another batch size or on another machine.
OUTCOME_NEUTRAL_POLICY_KEYS = {"device"}
OUTCOME_NEUTRAL_ENV_KEYS = {"compute_all_observations"}


def run_identity(cfg: DictConfig, eval_cfg: EvalConfig, checkpoint: dict[str, Any] | None = None) -> dict[str, Any]:
    """What must agree between shards (and between a run and its resume): env, policy, episodes, seed, and the
    checkpoint's identity (`PolicyConfig.identity()`) for a policy that has one."""
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    neutral = OUTCOME_NEUTRAL_POLICY_KEYS | getattr(
        resolve_target(str(container["policy"]["_target_"]), "policy"), "OUTCOME_NEUTRAL", frozenset()
    )
    policy = {k: v for k, v in container["policy"].items() if k not in neutral}
    env = {k: v for k, v in container["env"].items() if k not in OUTCOME_NEUTRAL_ENV_KEYS}
    identity = {"env": env, "policy": policy, "n_episodes": eval_cfg.n_episodes, "seed": cfg.seed}
    if checkpoint is not None:
        identity["checkpoint"] = checkpoint
    return identity


@dataclass(frozen=True)
class RoundLimit:
    """Run only the episodes before `end` of each task, none past `stops[task]` of a stopped task, and publish
    `sequential` with the results: one round of a sequence driven from outside (app/paired_sequential.py, or a
    sequential sweep's round, launch/sequential_sweep.py)."""

    end: int
    stops: dict[tuple[str, int], int]
    sequential: dict[str, Any] | None = None


def evaluate_config(
    cfg: DictConfig,
    eval_cfg: EvalConfig,
    out_dir: Path,
    label: str,
    on_locked: Callable[[], None] | None = None,
    limit: RoundLimit | None = None,
) -> Results:
    """`on_locked` runs once this process holds `out_dir` and its identity check passed (it saves `.hydra/`)."""
    parts = build_run(cfg)
    loggers = build_loggers(cfg.get("logger"))
    tasks = parts.tasks
    num_shards = eval_cfg.num_shards or 1
    check_shards_have_work(len(tasks) * eval_cfg.n_episodes, num_shards, len(tasks), eval_cfg.n_episodes)
    dynamic = eval_cfg.claims == "dynamic" and num_shards > 1
    keys = [t.key for t in tasks]
    # A dynamic shard may record any episode: its plan is the whole run's.
    plan = shard_plan(keys, eval_cfg.n_episodes, 0 if dynamic else eval_cfg.shard_id, 1 if dynamic else num_shards)
    checkpoint = parts.policy.identity()
    provenance = collect_provenance(parts.env, parts.policy, checkpoint, cfg.device)
    identity = run_identity(cfg, eval_cfg, checkpoint)
    if dynamic:
        identity["claims"] = "dynamic"
    with (
        RunStore(out_dir, identity, eval_cfg.shard_id, num_shards, tasks, plan, label, provenance=provenance) as store,
        recording(eval_cfg, parts.env, tasks, out_dir) as recorder,
    ):
        if recorder is not None:
            store.on_added = store.on_again = recorder.write
        if on_locked is not None:
            on_locked()
        if dynamic:
            interrupted, work = run_claimed(cfg, eval_cfg, parts, store, identity, run_lanes, recorder)
            return _publish(cfg, eval_cfg, loggers, store, work, label, interrupted)
        work = plan_work(tasks, plan, store, lost_steps(recorder, store))
        _log_plan(store, eval_cfg, plan, work)
        sequential = None
        if limit is not None:
            planned = {block.key for block in plan}  # a shard's plan may hold only some tasks
            for key, n in limit.stops.items():
                if key in planned:
                    store.stop_task(key, n)
            caps = {w.task.key: limit.stops.get(w.task.key, limit.end) for w in work}
            work = [
                TaskWork(w.task, [k for k in w.episodes if k < caps[w.task.key]], w.done, w.successes) for w in work
            ]
            sequential = limit.sequential
            interrupted = run_lanes(cfg, eval_cfg, parts, store, work)
        elif eval_cfg.sequential.stop is None:
            interrupted = run_lanes(cfg, eval_cfg, parts, store, work)
        else:
            check_sequential(eval_cfg.sequential, num_shards)
            interrupted, sequential = run_rounds(
                eval_cfg,
                store,
                lambda: plan_work(tasks, plan, store, lost_steps(recorder, store)),
                lambda todo: run_lanes(cfg, eval_cfg, parts, store, todo),
            )
        return _publish(cfg, eval_cfg, loggers, store, work, label, interrupted, sequential)


def _log_plan(store: RunStore, eval_cfg: EvalConfig, plan: list[TaskBlock], work: list[TaskWork]) -> None:
    """What a resumed run or a shard has to run, said once."""
    if store.resumed:
        to_run = sum(len(w.episodes) for w in work)
        log.info("resuming in %s: %d episodes already recorded, %d to run", store.out_dir, store.resumed, to_run)
    num_shards = eval_cfg.num_shards or 1
    if num_shards > 1:
        log.info("shard %d of %d: %d episodes over %d tasks", eval_cfg.shard_id, num_shards, plan_size(plan), len(work))


def lost_steps(recorder: DatasetRecorder | None, store: RunStore) -> set[tuple[str, int, int]]:
    """Recorded episodes whose steps a killed session lost: they run again, for their steps only."""
    return recorder.missing(store.done()) if recorder is not None else set()


def plan_work(
    tasks: list[TaskSpec], plan: list[TaskBlock], store: RunStore, again: set[tuple[str, int, int]] | None = None
) -> list[TaskWork]:
    """Each planned task's episodes not yet recorded in `store` (and those of `again`, recorded but to run again
    for their steps), in task order; linear in the episodes."""
    by_key = {t.key: t for t in tasks}
    done = store.done() - (again or set())
    recorded, successes = store.recorded_per_task()
    work = []
    for block in plan:
        todo = [k for k in block.episodes if (*block.key, k) not in done]
        work.append(TaskWork(by_key[block.key], todo, done=recorded[block.key], successes=successes[block.key]))
    return work


def run_lanes(
    cfg: DictConfig,
    eval_cfg: EvalConfig,
    parts: RunParts,
    store: RunStore,
    work: list[TaskWork],
    build_policy: Callable[[], Policy] | None = None,
    on_record: OnRecord | None = None,
    last: bool = True,
    make_pools: MakePools | None = None,
) -> RunInterrupted | None:
    """Runs `work`, every record into `store` (through `on_record` when given), whose shard file is written at the
    end whatever happens; returns the interruption (Ctrl-C, SLURM's signals) that stopped it, if one did. With
    `last` false more work follows with the same policy (`build_policy`) and envs (`make_pools`, owned by the
    caller), so the policy is neither finished nor reported unbuilt and the worker servers keep running."""
    out_dir = store.out_dir
    videos = video_recorder(eval_cfg, parts.env, work, out_dir)
    faults = WorkerFaults(eval_cfg.step_timeout_s, eval_cfg.worker_retries)
    try:
        if any(w.episodes for w in work):
            if eval_cfg.use_async_envs and eval_cfg.batch_size > 1:
                prestart_workers(parts.run_env)
            with using_worker_faults(faults):
                evaluate(
                    lane_settings(cfg, eval_cfg, parts, render=videos is not None),
                    work,
                    build_policy or parts.build_policy,
                    on_record=on_record or store.add,
                    progress=Progress(eval_cfg.progress_interval_s),
                    videos=videos,
                    finish=last,
                    make_pools=make_pools,
                )
        elif last:
            parts.policy.completed_unbuilt()
    except RunInterrupted as err:
        return err.with_traceback(None)  # its frames would keep the closed workers' shared memory alive
    finally:
        if last:
            stop_worker_servers()
        if videos is not None:
            videos.close()
        store.records[:] = without_missing_videos(store.records, out_dir)
        if last:  # else the caller writes the shard file once its last work has run
            store.write()
    return None


def lane_settings(cfg: DictConfig, eval_cfg: EvalConfig, parts: RunParts, render: bool) -> LaneSettings:
    """The lanes' settings of the composed config's run."""
    return LaneSettings(
        parts.run_env,
        parts.env_pre,
        parts.env_post,
        base_seed=cfg.seed,
        batch_size=eval_cfg.batch_size,
        use_async=eval_cfg.use_async_envs,
        max_parallel_tasks=eval_cfg.max_parallel_tasks,
        render=render,
    )


def _publish(
    cfg: DictConfig,
    eval_cfg: EvalConfig,
    loggers: list[ExperimentLogger],
    store: RunStore,
    work: list[TaskWork],
    label: str,
    interrupted: RunInterrupted | None,
    sequential: dict[str, Any] | None = None,
) -> Results:
    out_dir = store.out_dir
    num_shards = eval_cfg.num_shards or 1
    results = aggregate(store.sorted_records(), store.eval_s, store.provenance, store.complete)
    results = results.with_sequential(sequential)
    prefix = ""
    if interrupted is not None:  # partial results, marked so, quickly (SLURM kills soon): no plot, no loggers
        planned = sum(w.done + len(w.episodes) for w in work)
        prefix, loggers = interrupted.summarize(len(store.records), planned, store.episodes_path), []
    quick = interrupted is not None
    if num_shards == 1:
        run = single_run(cfg, out_dir, label) if loggers else None
        publish(results, out_dir, prefix + "Evaluation results", loggers=loggers, run=run, quick=quick)
    else:
        run = shard_run(cfg, out_dir, eval_cfg.shard_id, num_shards, label) if loggers else None
        title = f"Shard {eval_cfg.shard_id} of {num_shards} ({store.path}); the sweep's merge has the full results"
        publish_shard(results, out_dir, prefix + title, loggers=loggers, run=run, quick=quick)
    if interrupted is not None:
        raise interrupted
    return results


def video_recorder(
    eval_cfg: EvalConfig, env_cfg: EnvConfig, work: list[TaskWork], out_dir: Path
) -> VideoRecorder | None:
    """A recorder when some episode still to run is among the first `max_episodes_rendered` of its task; envs
    are created with rendering only then."""
    wanted = eval_cfg.max_episodes_rendered
    if not any(k < wanted for w in work for k in w.episodes):
        return None
    return VideoRecorder(out_dir, env_cfg.fps, wanted)
