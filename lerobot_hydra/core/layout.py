"""The names of every file and folder of a run dir and of a sweep dir, in one place.

A run dir (`python eval.py`: outputs/<date>/<time>; a sweep job: <sweep dir>/[<label dir>/]shard_<k>_of_<N> or
<sweep dir>/<job num>) holds:

    episodes.jsonl            every finished episode, one JSON line each (store/run_store.py)
    sessions.json             each process that ran in the dir, its versions and seeds (store/run_store.py)
    .lerobot_hydra.lock       held while a process evaluates in the dir (store/lock.py)
    .hydra/                   config.yaml, hydra.yaml, overrides.yaml, as Hydra writes them (store/job_files.py)
    eval.log                  the job log (Hydra's `<hydra.job.name>.log`; conf/config.yaml names the job `eval`)
    shard_<k>_of_<N>.json     a shard job's results, for the merge (store/shard_file.py)
    eval_info.json            the results (results/eval_info.py; a sweep dir's: the merged results)
    results.csv               one row per task and overall (loggers/csv.py, logger=csv)
    report.html               the report page (publish/report.py)
    success_by_task.png       the success plot (publish/plots.py)
    steps_to_success.png      the distribution of the steps of successful episodes (publish/plots.py)
    videos/<group>_<task id>/episode_<i>.mp4   the first episodes of each task (publish/video.py)

A sweep dir (`-m`: outputs/multirun/<date>/<time>) adds:

    multirun.yaml             the sweep's config, as Hydra writes it
    .submitit/<job id>/       submitit's job logs and results (hydra/launcher submitit_*: its submitit_folder)
    eval_info.json, report.html, success_by_task.png   the merged results of a one-combination sweep
    sweep_summary.json        one row per combination (sweeps/summary.py)
    sweep_summary.md, .tex, .csv   its tables for papers and leaderboards (sweeps/summary_export.py)
    sweep_results.csv         the same as a table (loggers/csv.py, logger=csv)
    sweep_heatmap.png, comparison_forest.png           plots of the sweep (publish/plots.py)
    policy_server/            a sweep's policy server job: server.json (where it listens), job.json, logs/
                              (serving/sweep_job.py)
    [<label dir>/].queue_<fingerprint>_of_<N>/   eval.claims=dynamic: the shards' work queue, beside their dirs:
                              owners/, claimed/, finished/ (store/queue.py)

Every module names these through here; tests/store/test_layout.py checks no other module spells them.
"""

from __future__ import annotations

import re
from pathlib import Path

# Run dir.
EPISODES_FILE = "episodes.jsonl"
SESSIONS_FILE = "sessions.json"
LOCK_FILE = ".lerobot_hydra.lock"
HYDRA_DIR = ".hydra"
HYDRA_CONFIG_FILE = "config.yaml"
HYDRA_HYDRA_FILE = "hydra.yaml"
HYDRA_OVERRIDES_FILE = "overrides.yaml"
EVAL_INFO_FILE = "eval_info.json"
RESULTS_CSV = "results.csv"
REPORT_FILE = "report.html"
SUCCESS_PLOT = "success_by_task.png"
STEPS_PLOT = "steps_to_success.png"
VIDEO_DIR = "videos"
JOB_LOG = "eval.log"

# Sweep dir.
MULTIRUN_FILE = "multirun.yaml"
SUMMARY_FILE = "sweep_summary.json"
SWEEP_CSV = "sweep_results.csv"
SWEEP_HEATMAP = "sweep_heatmap.png"
COMPARISON_PLOT = "comparison_forest.png"
LATENCY_PLOT = "latency_curve.png"  # a sweep over eval.clock.latency_ms: success against latency
LATENCY_CSV = "latency_curve.csv"
SERVER_DIR = "policy_server"
SERVER_ANNOUNCE_FILE = "server.json"
SERVER_JOB_FILE = "job.json"
SERVER_LOG_DIR = "logs"

# eval.claims=dynamic: the work queue beside the shard dirs (store/queue.py).
QUEUE_OWNERS_DIR = "owners"
QUEUE_CLAIMS_DIR = "claimed"
QUEUE_DONE_DIR = "finished"


def queue_dir_name(fingerprint: str, num_shards: int) -> str:
    return f".queue_{fingerprint}_of_{num_shards}"


# Shard jobs: their dir under the sweep dir and their results file.
SHARD_FILE_GLOB = "shard_*_of_*.json"
_SHARD_FILE = re.compile(r"^shard_(\d+)_of_(\d+)\.json$")


def shard_dir_name(shard_id: int, num_shards: int) -> str:
    return f"shard_{shard_id}_of_{num_shards}"


def shard_file_name(shard_id: int, num_shards: int) -> str:
    return f"{shard_dir_name(shard_id, num_shards)}.json"


def parse_shard_file_name(name: str) -> tuple[int, int] | None:
    """(shard id, number of shards) that a shard file's name says, or None for any other name."""
    match = _SHARD_FILE.match(name)
    return (int(match[1]), int(match[2])) if match else None


def video_path(group: str, task_id: int | str, episode_index: int) -> str:
    """An episode's video, relative to the run dir."""
    return f"{VIDEO_DIR}/{group}_{task_id}/episode_{episode_index}.mp4"


def only_hydra_files(root: Path) -> bool:
    """`root` holds nothing but job logs and Hydra's multirun.yaml (in it or in dirs under it): what Hydra wrote
    before a run or sweep that was refused."""
    return all(p.is_dir() or p.name in (JOB_LOG, MULTIRUN_FILE) for p in root.rglob("*"))
