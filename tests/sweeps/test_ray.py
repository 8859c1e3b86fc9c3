"""Shard sweeps on a real Ray cluster (`hydra/launcher=ray_cpu`, the session's local Ray head: 2 CPUs on 127.0.0.1):
four shards merge into the unsharded run; a shard whose worker is killed mid-run is named with its cause while the
other finishes, and the same command run again resumes and merges it; dynamic claims with one slowed shard finish
together; no cluster at the address is one line. Every case equals the unsharded run, each episode recorded once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, outcome, read_json, run_eval, run_here
from tests.sweeps.test_dynamic_claims import SLOWED, recorded
from tests.sweeps.test_slurm_faults import episodes, finish, wait_for_episodes

pytestmark = pytest.mark.ray

# Random actions never succeed early: every episode runs its full length (~1.5 s), so a kill lands mid-shard.
WORKLOAD = (
    "env.task=[push-v3]",
    "policy=random",
    "env.obs_type=state",
    "eval.n_episodes=6",
    "env.episode_length=200",
    "eval.batch_size=1",
)
TIMEOUT_S = 300


def on_ray(head: Any, *overrides: str) -> tuple[str, ...]:
    """The ray_cpu preset on the session's head, one CPU per shard, no retry: a dead shard is reported."""
    return (
        "hydra/launcher=ray_cpu",
        f"hydra.launcher.ray.init.address={head.address}",
        "hydra.launcher.ray.remote.num_cpus=1",
        "hydra.launcher.ray.remote.max_retries=0",
        *overrides,
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    out = tmp_path_factory.mktemp("unsharded")
    return [outcome(r) for r in run_here(*WORKLOAD, out_dir=out)["episodes"]]


def merged(sweep: Path) -> list[tuple]:
    return [outcome(r) for r in read_json(sweep / "eval_info.json")["episodes"]]


def start(sweep: Path, *overrides: str) -> subprocess.Popen[str]:
    args = [sys.executable, str(ROOT / "eval.py"), "-m", f"hydra.sweep.dir={sweep}", "eval.max_episodes_rendered=0"]
    return subprocess.Popen([*args, *overrides], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def shard_worker(head: Any, sweep: Path, shard: int, of: int) -> int:
    """The pid of the Ray worker running shard `shard`: the one whose job log (Hydra's, open while it runs) is in
    that shard's dir."""
    import psutil

    from tests.helpers.ray_head import worker_pids

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for pid in worker_pids(head, "run_in_worker"):
            try:
                files = [f.path for f in psutil.Process(pid).open_files()]
            except psutil.Error:
                continue
            if any(f"shard_{shard}_of_{of}{os.sep}" in f for f in files):
                return pid
        time.sleep(0.2)
    raise AssertionError(f"no Ray worker runs shard {shard} of {of}")


@pytest.mark.parametrize("option", ["ray", "ray_cpu", "ray_gpu"])
def test_the_ray_options_select_our_launcher_with_the_plugins_typed_settings(compose: Any, option: str) -> None:
    from hydra.errors import ConfigCompositionException

    cfg = compose(f"hydra/launcher={option}", return_hydra_config=True)
    assert cfg.hydra.launcher._target_ == "hydra_plugins.lerobot_hydra_launchers.launchers.RayLauncher"
    assert set(cfg.hydra.launcher.ray) == {"init", "remote"}
    with pytest.raises(ConfigCompositionException):
        compose(f"hydra/launcher={option}", "hydra.launcher.ray=soon", return_hydra_config=True)


def test_four_ray_shards_merge_into_the_unsharded_run(ray_head: Any, reference: list[tuple], tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_eval(*on_ray(ray_head, *WORKLOAD, "eval.shard_id=0,1,2,3"), out_dir=sweep, multirun=True)
    assert proc.stdout.count("Merged 4 shards") == 1, proc.stdout
    assert merged(sweep) == reference
    assert [len(episodes_of(sweep, k, 4)) for k in range(4)] == [2, 2, 1, 1]


def episodes_of(sweep: Path, shard: int, of: int) -> list[dict[str, Any]]:
    import json

    files = list(sweep.rglob(f"shard_{shard}_of_{of}/episodes.jsonl"))
    return [json.loads(line) for line in files[0].read_text().splitlines()] if files else []


def test_a_killed_shard_task_is_named_the_other_finishes_and_the_rerun_resumes(
    ray_head: Any, reference: list[tuple], tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep"
    command = on_ray(ray_head, *WORKLOAD, "eval.shard_id=0,1")
    proc = start(sweep, *command)
    worker = shard_worker(ray_head, sweep, 1, 2)
    wait_for_episodes(sweep, 1, 1, proc)
    os.kill(worker, signal.SIGKILL)  # as the OOM killer, or a node that is lost
    rc, out, err = finish(proc)

    assert rc == 1, err
    assert "Traceback" not in err, err
    assert "1 of 2 jobs of the sweep did not succeed" in err, err
    assert "ended without a result (its Ray worker process died: killed, out of memory, or its node lost): " in err
    lines = [line for line in err.splitlines() if line.startswith("  task ")]
    assert len(lines) == 2 and lines[0].endswith("completed: shard 0 of 2"), err
    assert lines[1].endswith("): shard 1 of 2"), err
    assert "shard 1 of 2 is incomplete" in err, err
    kept = len(episodes(sweep, 1))
    assert len(episodes(sweep, 0)) == 3 and 1 <= kept < 3, "shard 0 finished; shard 1 was killed mid-run"
    assert not (sweep / "eval_info.json").exists()

    rc, out, err = finish(start(sweep, *command))  # the same command again
    assert rc == 0, err
    assert "Merged 2 shards" in out, out
    assert set(recorded(sweep).values()) == {1} and len(episodes(sweep, 1)) == 3
    assert merged(sweep) == reference


def test_dynamic_claims_let_the_fast_shard_take_the_slowed_ones_work(
    ray_head: Any, reference: list[tuple], tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep"
    slowed = (*SLOWED[:2], "+env.slow_step_sleep_s=0.03")  # shard 1: ~6 s more per episode
    overrides = on_ray(ray_head, *WORKLOAD, *slowed, "eval.claims=dynamic", "eval.shard_id=0,1")
    proc = run_eval(*overrides, out_dir=sweep, multirun=True, timeout=TIMEOUT_S)
    assert "Merged 2 shards" in proc.stdout, proc.stdout
    assert merged(sweep) == reference
    assert set(recorded(sweep).values()) == {1}
    # Statically each shard runs 3 episodes; the fast one took some of the slowed one's.
    counts = Counter({k: len(episodes(sweep, k)) for k in (0, 1)})
    assert counts[1] < 3 < counts[0], counts


def test_no_ray_cluster_at_the_address_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    sweep = tmp_path / "sweep"
    proc = run_eval(
        *WORKLOAD, "eval.shard_id=0,1", "hydra/launcher=ray_cpu", f"hydra.launcher.ray.init.address=127.0.0.1:{port}",
        out_dir=sweep, multirun=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"error: no Ray cluster at hydra.launcher.ray.init.address=127.0.0.1:{port} (Connection refused); start one"
        )
    ), proc.stderr
    assert not list(sweep.rglob("episodes.jsonl"))


def test_a_sequential_sweep_on_ray_matches_the_single_process_run(ray_head: Any, tmp_path: Path) -> None:
    """The sequential sweeper's rounds launched as Ray tasks: the same stops and episodes as one process."""
    from tests.sweeps.test_sequential_sweep import BELOW

    alone = run_here(*BELOW, out_dir=tmp_path / "single")
    sweep = tmp_path / "sweep"
    run_eval(*on_ray(ray_head, *BELOW, "eval.shard_id=0,1", "hydra/sweeper=sequential"), out_dir=sweep, multirun=True)
    merged_info = read_json(sweep / "eval_info.json")
    assert merged_info["sequential"] == alone["sequential"]
    assert {t: s["n_episodes"] for t, s in alone["sequential"]["per_task"].items()} == {"reach-v3": 8, "push-v3": 8}
    assert merged(sweep) == [outcome(r) for r in alone["episodes"]]
