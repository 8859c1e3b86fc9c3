"""LeRobot's `eval_info.json` layout: its one writer (`to_eval_info`) and its reader (`read_eval_info`).

The layout is LeRobot's (`per_task[{task_group, task_id, task_name, task, metrics}]`, `per_group`, `overall`) plus
every episode record, the provenance and, for a single run, `complete`. Nothing else builds or indexes it: the
reader rebuilds the typed results from the episode records through the one aggregation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.results.aggregate import Results, Summary, aggregate


def _summary(s: Summary) -> dict[str, Any]:
    return {
        "avg_sum_reward": s.avg_sum_reward,
        "avg_max_reward": s.avg_max_reward,
        "pc_success": s.pc_success,
        "n_episodes": s.n_episodes,
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
    if results.provenance is not None:
        info["provenance"] = results.provenance
    if results.complete is not None:
        info["complete"] = results.complete
    return info


def from_eval_info(info: dict[str, Any]) -> Results:
    """The results an eval_info.json's content holds, aggregated again from its episode records (in its order);
    KeyError or TypeError when it has no episode records."""
    records = [EpisodeRecord.from_dict(e) for e in info["episodes"]]
    eval_s = info.get("overall", {}).get("eval_s") or 0.0
    return aggregate(records, float(eval_s), info.get("provenance"), info.get("complete"))


def read_eval_info(path: Path) -> Results:
    """`from_eval_info` of a file; ValueError (with the reason) when it cannot be read as one."""
    try:
        return from_eval_info(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(str(err)) from err
