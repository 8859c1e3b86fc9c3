"""What the W&B (or Trackio) run of a result set logs, taken from its typed results: summary metrics, the per-task
and episode tables, the plots and a sample of its videos. Trackio's media and table classes take the same
arguments as W&B's, so one payload serves both (`lib`: the `wandb` or `trackio` module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.results.aggregate import Results, Summary

SUMMARY_KEYS = ("pc_success", "avg_sum_reward", "avg_max_reward", "n_episodes", "n_errors")
TASK_COLUMNS = [
    "task_group",
    "task_id",
    "task_name",
    "task",
    "n_episodes",
    "successes",
    "pc_success",
    "ci95_low",
    "ci95_high",
    "avg_sum_reward",
    "avg_max_reward",
    "n_errors",
]
EPISODE_COLUMNS = [
    "task_group",
    "task_id",
    "task_name",
    "episode_index",
    "seed",
    "init_state_id",
    "success",
    "sum_reward",
    "max_reward",
    "steps",
    "video_path",
    "error",
    "error_step",
]


def summary_metrics(results: Results) -> dict[str, float | None]:
    """`overall/<key>` (with eval_s, eval_ep_s) and `per_group/<group>/<key>`: rates, average rewards, episode
    counts (evaluated and error episodes) and interval bounds."""
    scopes: list[tuple[str, Summary]] = [("overall", results.overall)]
    scopes += [(f"per_group/{g.group}", g) for g in results.groups]
    out: dict[str, float | None] = {}
    for scope, summary in scopes:
        for key in SUMMARY_KEYS:
            out[f"{scope}/{key}"] = getattr(summary, key)
        out[f"{scope}/ci95_low"], out[f"{scope}/ci95_high"] = summary.ci95_pc_success
    out["overall/eval_s"] = results.eval_s
    out["overall/eval_ep_s"] = results.eval_ep_s
    return out


def task_rows(results: Results) -> list[list[Any]]:
    return [
        [
            t.task_group,
            t.task_id,
            t.task_name,
            t.task,
            t.n_episodes,
            t.successes,
            t.pc_success,
            *t.ci95_pc_success,
            t.avg_sum_reward,
            t.avg_max_reward,
            t.n_errors,
        ]
        for t in results.tasks
    ]


def episode_rows(results: Results) -> list[list[Any]]:
    return [[getattr(r, c) for c in EPISODE_COLUMNS] for r in results.episodes]


def sample_videos(results: Results, out_dir: Path, limit: int) -> dict[str, list[tuple[Path, str]]]:
    """Up to `limit` existing videos keyed by task ('<group>_<task_id>'), taking every task's first filmed
    episode before any task's second, so a sample covers as many tasks as possible."""
    by_task: dict[str, list[EpisodeRecord]] = {}
    for r in results.episodes:
        if r.video_path and (out_dir / r.video_path).is_file():
            by_task.setdefault(f"{r.task_group}_{r.task_id}", []).append(r)
    for episodes in by_task.values():
        episodes.sort(key=lambda r: r.episode_index)
    chosen: dict[str, list[tuple[Path, str]]] = {}
    depth, taken = 0, 0
    while taken < limit and any(len(eps) > depth for eps in by_task.values()):
        for key, episodes in by_task.items():
            if depth < len(episodes) and taken < limit:
                r = episodes[depth]
                caption = f"{r.task_name} episode {r.episode_index}: {'success' if r.success else 'failure'}"
                chosen.setdefault(key, []).append((out_dir / str(r.video_path), caption))
                taken += 1
        depth += 1
    return chosen


def results_payload(
    lib: Any, results: Results, out_dir: Path, images: dict[str, Path], videos: int, video_lists: bool = True
) -> dict[str, Any]:
    """Metrics, tables, plots and up to `videos` videos (paths relative to `out_dir`): a list of them per task
    with `video_lists`, else one key per video (`videos/<task>/<n>`; Trackio logs no lists of media)."""
    payload: dict[str, Any] = dict(summary_metrics(results))
    payload["per_task"] = lib.Table(columns=TASK_COLUMNS, data=task_rows(results))
    payload["episodes"] = lib.Table(columns=EPISODE_COLUMNS, data=episode_rows(results))
    for key, path in images.items():
        payload[f"plots/{key}"] = lib.Image(str(path))
    for key, sample in sample_videos(results, out_dir, videos).items():
        clips = [lib.Video(str(p), caption=c, format="mp4") for p, c in sample]
        if video_lists:
            payload[f"videos/{key}"] = clips
        else:
            payload.update({f"videos/{key}/{n}": clip for n, clip in enumerate(clips)})
    return payload
