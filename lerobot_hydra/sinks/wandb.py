"""Weights & Biases: one W&B run per result set (a single evaluation, a shard, a merged sweep).

Everything is logged once the results are on disk, never from the rollout. A W&B failure (package missing,
no network, bad key) is a single warning: the evaluation carries on and its files remain the record.
"""

from __future__ import annotations

import dataclasses
import logging
import netrc
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lerobot_hydra.core.errors import UserError, missing_extra
from lerobot_hydra.sinks.loggers import RunMeta
from lerobot_hydra.sinks.wandb_sweep import sweep_payload

log = logging.getLogger("lerobot_hydra")

MODES = ("online", "offline", "disabled")
SUMMARY_KEYS = ("pc_success", "avg_sum_reward", "avg_max_reward", "n_episodes")
# wandb.init waits this long for its service before giving up (its own default is 90 s).
INIT_TIMEOUT_S = 30.0

_said: set[str] = set()


def _say_once(key: str, level: int, message: str, *args: Any) -> None:
    if key not in _said:
        _said.add(key)
        log.log(level, message, *args)


def api_key_configured() -> bool:
    """WANDB_API_KEY is set, or the netrc file has an entry for the W&B host (as `wandb login` writes)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


@dataclass
class WandbLoggerConfig:
    project: str = "lerobot_hydra"
    entity: str | None = None
    # None: the sweep's name for shards and merged runs (and runs of a multirun); no group for a single run.
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    # online | offline | disabled; None: WANDB_MODE if set, else online when an API key is configured, else offline.
    mode: str | None = None
    # None: eval (a single run), shard or merged.
    job_type: str | None = None
    # None: named after the run (or sweep) directory, the swept overrides and the shard.
    name: str | None = None
    notes: str | None = None
    # Where W&B keeps its files (a wandb/ folder is created in it); None: the run's output dir.
    dir: str | None = None
    # Videos uploaded per run, spread over tasks (first episode of every task first); 0: none.
    max_videos: int = 50

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in MODES:
            raise UserError(f"logger.mode must be one of {', '.join(MODES)} (or null for automatic), got '{self.mode}'")
        if self.max_videos < 0:
            raise UserError(f"logger.max_videos must be 0 or more, got {self.max_videos}")

    def resolved_mode(self, wandb_dir: Path) -> str:
        if self.mode is not None:
            return self.mode
        env_mode = os.environ.get("WANDB_MODE")
        if env_mode in MODES:
            return env_mode
        if api_key_configured():
            return "online"
        _say_once(
            "offline",
            logging.INFO,
            "W&B: no API key configured (WANDB_API_KEY or `wandb login`), so runs are logged offline under %s; "
            "upload them later with: wandb sync %s/offline-run-*",
            wandb_dir,
            wandb_dir,
        )
        return "offline"

    def log_results(self, info: dict[str, Any], out_dir: Path, run: RunMeta, images: dict[str, Path]) -> None:
        if "provenance" in info:  # what made the results (versions, checkpoint, device) beside the config
            run = dataclasses.replace(run, config={**run.config, "provenance": info["provenance"]})
        self._safely(out_dir, run, lambda wandb: self._payload(wandb, info, out_dir, run, images))

    def log_sweep(self, summary: dict[str, Any], out_dir: Path, run: RunMeta, images: dict[str, Path]) -> None:
        self._safely(out_dir, run, lambda wandb: sweep_payload(wandb, summary, images))

    def _safely(self, out_dir: Path, run: RunMeta, payload: Callable[[Any], dict[str, Any]]) -> None:
        try:
            import wandb
        except ImportError:
            _say_once("import", logging.WARNING, "W&B logging skipped: %s", missing_extra("wandb", "wandb"))
            return
        try:
            self._log(wandb, out_dir, run, payload)
        except Exception as err:  # noqa: BLE001 - W&B never fails an evaluation
            _say_once(
                "failed",
                logging.WARNING,
                "W&B logging failed (%s: %s); the results are on disk in %s",
                type(err).__name__,
                str(err).strip().splitlines()[0] if str(err).strip() else "",
                out_dir,
            )

    def _payload(
        self, wandb: Any, info: dict[str, Any], out_dir: Path, run: RunMeta, images: dict[str, Path]
    ) -> dict[str, Any]:
        payload: dict[str, Any] = dict(summary_metrics(info))
        payload["per_task"] = wandb.Table(columns=TASK_COLUMNS, data=task_rows(info))
        payload["episodes"] = wandb.Table(columns=EPISODE_COLUMNS, data=episode_rows(info))
        for key, path in images.items():
            payload[f"plots/{key}"] = wandb.Image(str(path))
        if run.log_videos:
            for key, videos in sample_videos(info, out_dir, self.max_videos).items():
                payload[f"videos/{key}"] = [wandb.Video(str(p), caption=c, format="mp4") for p, c in videos]
        return payload

    def _log(self, wandb: Any, out_dir: Path, run: RunMeta, payload: Callable[[Any], dict[str, Any]]) -> None:
        root = Path(self.dir) if self.dir else out_dir
        mode = self.resolved_mode(root / "wandb")
        if mode == "disabled":
            return
        root.mkdir(parents=True, exist_ok=True)
        if mode == "offline":
            remove_offline_runs(root / "wandb", run.run_id)
        wb_run = wandb.init(
            project=self.project,
            entity=self.entity,
            group=self.group or run.group,
            job_type=self.job_type or run.job_type,
            name=f"{self.name} {run.detail}".strip() if self.name else run.name,
            notes=self.notes,
            tags=list(self.tags),
            config=run.config,
            id=run.run_id,
            resume="allow" if mode == "online" else None,
            dir=str(root),
            mode=mode,
            settings=wandb.Settings(console="off", x_disable_stats=True, init_timeout=INIT_TIMEOUT_S, silent=True),
        )
        try:
            wb_run.log(payload(wandb))
            where = wb_run.url if mode == "online" else str(Path(wb_run.dir).parent)
        finally:
            wb_run.finish()
        log.info("W&B %s run '%s' (%s, group %s): %s", mode, wb_run.name, run.job_type, wb_run.group or "-", where)


def remove_offline_runs(wandb_dir: Path, run_id: str) -> None:
    """Earlier offline copies of this run (a resumed shard, a re-run merge) are superseded by the one about
    to be written, so that `wandb sync` uploads each run once."""
    for old in wandb_dir.glob(f"offline-run-*-{run_id}"):
        shutil.rmtree(old, ignore_errors=True)


def summary_metrics(info: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    scopes = [("overall", info["overall"])] + [(f"per_group/{g}", s) for g, s in info["per_group"].items()]
    for scope, summary in scopes:
        for key in SUMMARY_KEYS:
            out[f"{scope}/{key}"] = summary[key]
        out[f"{scope}/ci95_low"], out[f"{scope}/ci95_high"] = summary["ci95_pc_success"]
    for key in ("eval_s", "eval_ep_s"):
        if key in info["overall"]:
            out[f"overall/{key}"] = info["overall"][key]
    return out


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
]


def task_rows(info: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for t in info["per_task"]:
        m = t["metrics"]
        n = len(m["successes"])
        rows.append(
            [
                t["task_group"],
                t["task_id"],
                t["task_name"],
                t["task"],
                n,
                sum(m["successes"]),
                m["pc_success"],
                *m["ci95_pc_success"],
                sum(m["sum_rewards"]) / n if n else float("nan"),
                sum(m["max_rewards"]) / n if n else float("nan"),
            ]
        )
    return rows


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
]


def episode_rows(info: dict[str, Any]) -> list[list[Any]]:
    return [[e.get(c) for c in EPISODE_COLUMNS] for e in info.get("episodes", [])]


def sample_videos(info: dict[str, Any], out_dir: Path, limit: int) -> dict[str, list[tuple[Path, str]]]:
    """Up to `limit` existing videos keyed by task ('<group>_<task_id>'), taking every task's first filmed
    episode before any task's second, so a sample covers as many tasks as possible."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for e in info.get("episodes", []):
        if e.get("video_path") and (out_dir / e["video_path"]).is_file():
            by_task.setdefault(f"{e['task_group']}_{e['task_id']}", []).append(e)
    for episodes in by_task.values():
        episodes.sort(key=lambda e: e["episode_index"])
    chosen: dict[str, list[tuple[Path, str]]] = {}
    depth, taken = 0, 0
    while taken < limit and any(len(eps) > depth for eps in by_task.values()):
        for key, episodes in by_task.items():
            if depth < len(episodes) and taken < limit:
                e = episodes[depth]
                caption = f"{e['task_name']} episode {e['episode_index']}: {'success' if e['success'] else 'failure'}"
                chosen.setdefault(key, []).append((out_dir / e["video_path"], caption))
                taken += 1
        depth += 1
    return chosen
