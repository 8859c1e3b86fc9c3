"""LeRobot's `eval_info.json` layout: its one writer (`to_eval_info`) and its reader (`read_eval_info`).

The layout is LeRobot's (`per_task[{task_group, task_id, task_name, task, n_episodes, n_success, pc_success,
pc_success_ci95, metrics}]`, `per_group`, `overall`, the counts and 95% Wilson intervals in percent at every level as
LeRobot's eval writes them since its Wilson intervals landed) plus `n_errors` at every level (error episodes, left
out of the counts, rates and per-episode metrics), every episode record (error episodes included), the provenance,
`not_reproducible` (why, when some episodes cannot be run again to the same outcome) and, for a single run,
`complete`. Nothing else builds or indexes it: the reader rebuilds the typed results from the episode records
through the one aggregation.

`lerobot-eval`'s own eval_info.json has no episode records: `lerobot_eval_records` reads its per-task lists
(successes, rewards, seeds) as records, so a comparison can take it as one side.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.results.aggregate import Results, Summary, aggregate


def _counts(s: Summary) -> dict[str, Any]:
    """LeRobot's keys: the episodes, the successes, the rate and its 95% Wilson interval (percent); and ours, the
    error episodes (left out of the others)."""
    return {
        "n_episodes": s.n_episodes,
        "n_errors": s.n_errors,
        "n_success": s.successes,
        "pc_success": s.pc_success,
        "pc_success_ci95": list(s.ci95_pc_success),
        **_latency(s),
    }


def _latency(s: Summary) -> dict[str, Any]:
    """Ours, where the records say (a chunked policy): the inference latency's p50 and p99 in ms."""
    if s.inference_ms_p50 is None:
        return {}
    return {"inference_ms_p50": s.inference_ms_p50, "inference_ms_p99": s.inference_ms_p99}


def _summary(s: Summary) -> dict[str, Any]:
    return {
        "avg_sum_reward": s.avg_sum_reward,
        "avg_max_reward": s.avg_max_reward,
        **_counts(s),
        "ci95_pc_success": list(s.ci95_pc_success),
        "video_paths": list(s.video_paths),
    }


def to_eval_info(results: Results) -> dict[str, Any]:
    """The content of eval_info.json."""
    per_task = [
        {
            "task_group": t.task_group,
            "task_id": t.task_id,
            "task_name": t.task_name,
            "task": t.task,
            **_counts(t),
            "metrics": {
                "sum_rewards": [r.sum_reward for r in t.records],
                "max_rewards": [r.max_reward for r in t.records],
                "successes": [r.success for r in t.records],
                "seeds": [r.seed for r in t.records],
                "video_paths": list(t.video_paths),
                "pc_success": t.pc_success,
                "ci95_pc_success": list(t.ci95_pc_success),
            },
        }
        for t in results.tasks
    ]
    info: dict[str, Any] = {
        "per_task": per_task,
        "per_group": {g.group: _summary(g) for g in results.groups},
        "overall": {**_summary(results.overall), "eval_s": results.eval_s, "eval_ep_s": results.eval_ep_s},
        "episodes": [r.to_dict() for r in results.episodes],
    }
    if results.not_reproducible:  # e.g. a measured eval.clock: running it again gives other episodes
        info["not_reproducible"] = results.not_reproducible
    if results.provenance is not None:
        info["provenance"] = results.provenance
    if results.complete is not None:
        info["complete"] = results.complete
    if results.sequential is not None:
        info["sequential"] = results.sequential
    return info


def from_eval_info(info: dict[str, Any]) -> Results:
    """The results an eval_info.json's content holds, aggregated again from its episode records (in its order);
    KeyError or TypeError when it has no episode records."""
    records = [EpisodeRecord.from_dict(e) for e in info["episodes"]]
    eval_s = info.get("overall", {}).get("eval_s") or 0.0
    results = aggregate(records, float(eval_s), info.get("provenance"), info.get("complete"))
    return results.with_sequential(info.get("sequential"))


def lerobot_eval_records(info: dict[str, Any]) -> tuple[list[EpisodeRecord], bool]:
    """The episodes of an eval_info.json without episode records (lerobot-eval's own), from each task's per-episode
    lists in episode order, and whether every episode's seed is recorded (`metrics.seeds`; lerobot-eval records
    none: its episodes cannot be paired by seed). An unrecorded seed is -1; steps and wall time are not recorded.
    KeyError or TypeError when it has no per-task lists."""
    records: list[EpisodeRecord] = []
    seeded = True
    for task in info["per_task"]:
        metrics = task["metrics"]
        successes = metrics["successes"]
        seeds = metrics.get("seeds") or []
        seeded = seeded and len(seeds) == len(successes) and all(isinstance(x, int) for x in seeds)
        group, task_id = str(task["task_group"]), int(task["task_id"])
        for k, success in enumerate(successes):
            records.append(
                EpisodeRecord(
                    task_group=group,
                    task_id=task_id,
                    task_name=str(task.get("task_name") or group),
                    task=str(task.get("task") or ""),
                    episode_index=k,
                    seed=int(seeds[k]) if k < len(seeds) and isinstance(seeds[k], int) else -1,
                    success=bool(success),
                    sum_reward=float(metrics["sum_rewards"][k]),
                    max_reward=float(metrics["max_rewards"][k]),
                    steps=0,
                    wall_s=0.0,
                )
            )
    return records, seeded


def read_eval_info(path: Path) -> Results:
    """`from_eval_info` of a file; ValueError (with the reason) when it cannot be read as one."""
    try:
        return from_eval_info(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(str(err)) from err
