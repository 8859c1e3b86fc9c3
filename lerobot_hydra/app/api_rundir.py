"""An API evaluation written as eval.py writes a run dir (episodes.jsonl, the shard file, eval_info.json, the
table, the plot, the report page, videos), then logged."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from lerobot_hydra.app.evaluation import run_identity, video_recorder
from lerobot_hydra.outputs.publish import publish
from lerobot_hydra.outputs.video import without_missing_videos
from lerobot_hydra.results.aggregate import Results, aggregate
from lerobot_hydra.rollout.build import RunParts
from lerobot_hydra.rollout.plan import shard_plan
from lerobot_hydra.rundir.store import RunStore

if TYPE_CHECKING:
    from lerobot_hydra.app.api import Evaluator

LABEL = "api"


def evaluate_into(evaluator: Evaluator, parts: RunParts, out_dir: Path, step: int | None) -> Results:
    """`evaluator`'s evaluation of its current policy into the new run dir `out_dir`."""
    cfg, ev = evaluator.cfg, evaluator.eval_cfg
    num_shards = ev.num_shards or 1
    work = evaluator.work(parts)
    plan = shard_plan([t.key for t in parts.tasks], ev.n_episodes, ev.shard_id, num_shards)
    identity = run_identity(cfg, ev)
    provenance = evaluator.provenance(parts)
    with RunStore(out_dir, identity, ev.shard_id, num_shards, parts.tasks, plan, LABEL, provenance=provenance) as store:
        videos = video_recorder(ev, parts.env, work, out_dir)
        try:
            evaluator.run(parts, work, store.add, videos)
        finally:
            if videos is not None:
                videos.close()
            store.records[:] = without_missing_videos(store.records, out_dir)
            store.write()
        results = aggregate(store.sorted_records(), store.eval_s, store.provenance, store.complete)
        run = dataclasses.replace(evaluator.run_meta(step, out_dir), key=f"{out_dir.resolve()}|api")
        publish(results, out_dir, "Evaluation results", loggers=evaluator.loggers, run=run)
    return results
