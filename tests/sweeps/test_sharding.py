"""Sharded evaluation for real: MetaWorld shards on the local SLURM cluster and as local processes, merged by
the multirun callback and by lerobot-hydra-merge, failed and killed shards resumed, bad shard sets refused."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lerobot_hydra.core.labels import job_subdir, label_dir_name
from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.rollout.plan import TaskBlock
from lerobot_hydra.store.run_store import RunStore
from tests.conftest import CONF, ROOT, outcome, read_json, run_eval, run_here

# The expert on two tasks with short episodes: some succeed, some do not.
WORKLOAD = ("env.task=[reach-v3,push-v3]", "eval.n_episodes=3", "env.episode_length=50", "eval.batch_size=1")
# The random policy never succeeds early, so each of its episodes takes the same, measurable time.
SLOW_WORKLOAD = (
    "env.task=[push-v3]",
    "policy=random",
    "env.obs_type=state",
    "eval.n_episodes=8",
    "env.episode_length=500",
    "eval.batch_size=1",
)
SLURM_TIMEOUT_S = 420


def merge_cli(sweep_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lerobot_hydra.sweeps.shards", *args, str(sweep_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def outcomes(info: dict[str, Any]) -> list[tuple]:
    return [outcome(r) for r in info["episodes"]]


def shard_files(sweep_dir: Path) -> dict[int, Path]:
    return {int(p.name.split("_")[1]): p for p in sweep_dir.rglob("shard_*_of_*.json") if ".submitit" not in p.parts}


def assert_merged_like(merged: dict[str, Any], reference: dict[str, Any]) -> None:
    assert outcomes(merged) == outcomes(reference)
    assert [t["metrics"]["successes"] for t in merged["per_task"]] == [
        t["metrics"]["successes"] for t in reference["per_task"]
    ]
    for key in ("pc_success", "n_episodes", "avg_sum_reward", "avg_max_reward", "ci95_pc_success"):
        assert merged["overall"][key] == pytest.approx(reference["overall"][key]), key


@pytest.fixture(scope="session")
def slurm() -> None:
    """The local single-node cluster: started here if it is not running; a test that needs it fails without it."""
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "slurm_local.sh"), "start"], capture_output=True, text=True, timeout=180
    )
    if proc.returncode != 0:
        pytest.fail(f"the local SLURM cluster did not start:\n{proc.stdout}\n{proc.stderr}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """WORKLOAD unsharded, in batches of 3 through async workers (the shards step one env in-process)."""
    out = tmp_path_factory.mktemp("unsharded")
    run_here(*WORKLOAD[:-1], "eval.batch_size=3", out_dir=out)
    info = read_json(out / "eval_info.json")
    assert 0 < info["overall"]["pc_success"] < 100, "the workload should mix successes and failures"
    return info


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """WORKLOAD as 3 shards running in parallel as local processes (the local_shards launcher preset)."""
    sweep = tmp_path_factory.mktemp("local_sweep")
    run_eval(*WORKLOAD, "eval.shard_id=0,1,2", "hydra/launcher=local_shards", out_dir=sweep, multirun=True)
    return sweep


def test_shard_job_dirs_are_named_by_their_overrides_so_reruns_land_in_place() -> None:
    overrides = ["policy=random", "eval.shard_id=2", "eval.num_shards=4", "env.task=[reach-v3,push-v3]"]
    assert job_subdir(7, 2, 4, overrides) == "env.task=[reach-v3,push-v3],policy=random/shard_2_of_4"
    assert job_subdir(0, 2, 4, list(reversed(overrides))) == job_subdir(7, 2, 4, overrides)
    assert job_subdir(3, 0, 4, ["eval.shard_id=0", "eval.num_shards=4"]) == "shard_0_of_4"
    assert job_subdir(3, 0, None, ["policy=random"]) == "3"
    assert label_dir_name("policy.path=/ckpt/a") == "policy.path=%2Fckpt%2Fa"
    long = label_dir_name("x=" + "a" * 300)
    assert len(long) <= 120 and long != label_dir_name("x=" + "a" * 299 + "b")


def test_a_torn_last_line_is_cut_before_the_resumed_run_appends(tmp_path: Path) -> None:
    task = TaskSpec("g", 0, "g", "a task", 10)
    planned = [TaskBlock("g", 0, 0, 2)]

    def record(k: int) -> EpisodeRecord:
        return EpisodeRecord("g", 0, "g", "a task", k, 1000 + k, False, 0.5, 0.5, 10, 0.1)

    with RunStore(tmp_path, {"seed": 1}, 0, 1, [task], planned, "") as store:
        store.add(record(0))
    with open(tmp_path / "episodes.jsonl", "a") as f:
        f.write('{"task_group": "g", "task_id": 0, "epis')  # killed mid-write
    with RunStore(tmp_path, {"seed": 1}, 0, 1, [task], planned, "") as resumed:
        assert resumed.done() == {("g", 0, 0)}
        resumed.add(record(1))
    with RunStore(tmp_path, {"seed": 1}, 0, 1, [task], planned, "") as again:
        assert again.done() == {("g", 0, 0), ("g", 0, 1)}


def test_a_slurm_sweep_without_sbatch_stops_before_submitting(tmp_path: Path) -> None:
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    proc = run_eval(
        *WORKLOAD,
        "eval.shard_id=0,1",
        "hydra/launcher=submitit_slurm",
        out_dir=tmp_path / "sweep",
        multirun=True,
        check=False,
        timeout=120,
        env={"PATH": str(empty_path)},
    )
    assert proc.returncode == 2
    assert "needs SLURM's sbatch, which is not on PATH" in proc.stderr
    assert not (tmp_path / "sweep" / ".submitit").exists()


@pytest.mark.slow
@pytest.mark.slurm
def test_four_slurm_shards_merge_into_the_unsharded_result(
    slurm: None, reference: dict[str, Any], tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep"
    proc = run_eval(
        *WORKLOAD,
        "eval.shard_id=0,1,2,3",
        "hydra/launcher=submitit_slurm",
        out_dir=sweep,
        multirun=True,
        timeout=SLURM_TIMEOUT_S,
    )
    assert len(list((sweep / ".submitit").glob("*_[0-3]"))) == 4, "one SLURM job per shard"
    files = shard_files(sweep)
    assert sorted(files) == [0, 1, 2, 3]
    shards = [read_json(files[k]) for k in range(4)]
    assert [len(s["episodes"]) for s in shards] == [2, 2, 1, 1]  # 6 episodes in contiguous balanced blocks
    merged = read_json(sweep / "eval_info.json")
    assert_merged_like(merged, reference)
    assert merged["overall"]["eval_s"] == pytest.approx(sum(s["eval_s"] for s in shards))
    assert proc.stdout.count("Merged 4 shards") == 1


@pytest.mark.slow
@pytest.mark.slurm
def test_a_failed_slurm_shard_is_named_and_rerunning_it_alone_completes_the_merge(
    slurm: None, reference: dict[str, Any], tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep"
    # The job of shard 2 dies before Python starts, as on a broken node.
    kill_shard_2 = 'hydra.launcher.setup=["if [ \\"$SLURM_ARRAY_TASK_ID\\" = 2 ]; then exit 1; fi"]'
    failed = run_eval(
        *WORKLOAD,
        "eval.shard_id=0,1,2,3",
        "hydra/launcher=submitit_slurm",
        kill_shard_2,
        out_dir=sweep,
        multirun=True,
        check=False,
        timeout=SLURM_TIMEOUT_S,
    )
    assert failed.returncode != 0
    assert "ended without a result (state: FAILED)" in failed.stderr
    assert "shard 2 of 4 is missing" in failed.stderr
    assert not (sweep / "eval_info.json").exists()
    # The sweep stops at the failed job; wait until the shards still running on the cluster are done.
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and set(shard_files(sweep)) != {0, 1, 3}:
        time.sleep(1)
    while time.monotonic() < deadline and merge_cli(sweep, "--check").stderr.count("error:") > 1:
        time.sleep(1)
    check = merge_cli(sweep)
    errors = [line for line in check.stderr.splitlines() if line.strip()]
    assert check.returncode == 1
    assert len(errors) == 1 and "shard 2 of 4 is missing; run it: python eval.py -m" in errors[0], check.stderr
    assert not (sweep / "eval_info.json").exists()

    run_eval(
        *WORKLOAD,
        "eval.shard_id=2",
        "eval.num_shards=4",
        "hydra/launcher=submitit_slurm",
        out_dir=sweep,
        multirun=True,
        timeout=SLURM_TIMEOUT_S,
    )
    assert_merged_like(read_json(sweep / "eval_info.json"), reference)
    assert merge_cli(sweep).returncode == 0


@pytest.mark.slow
def test_a_killed_shard_resumes_without_redoing_its_recorded_episodes(tmp_path: Path) -> None:
    unsharded = tmp_path / "unsharded"
    run_here(*SLOW_WORKLOAD, out_dir=unsharded)
    shards = tmp_path / "shards"
    run_here(*SLOW_WORKLOAD, "eval.shard_id=1", "eval.num_shards=2", out_dir=shards / "shard_1")
    killed_dir = shards / "shard_0"
    args = [sys.executable, str(ROOT / "eval.py"), f"hydra.run.dir={killed_dir}", "eval.max_episodes_rendered=0"]
    args += [*SLOW_WORKLOAD, "eval.shard_id=0", "eval.num_shards=2"]
    proc = subprocess.Popen(
        args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    episodes = killed_dir / "episodes.jsonl"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if episodes.exists() and episodes.read_text().count("\n") >= 1:
                break
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    kept = [line for line in episodes.read_text().splitlines(keepends=True) if line.endswith("\n")]
    assert 1 <= len(kept) < 4, f"the kill should land mid-shard; {len(kept)} of 4 episodes were recorded"

    check = merge_cli(shards)
    assert check.returncode == 1
    assert f"shard 0 of 2 is incomplete ({len(kept)} of 4 episodes)" in check.stderr, check.stderr
    assert not (shards / "eval_info.json").exists()

    resumed = run_eval(*SLOW_WORKLOAD, "eval.shard_id=0", "eval.num_shards=2", out_dir=killed_dir)
    assert f"{len(kept)} episodes already recorded, {4 - len(kept)} to run" in resumed.stdout + resumed.stderr
    lines = episodes.read_text().splitlines(keepends=True)
    assert lines[: len(kept)] == kept, "recorded episodes are kept as they were"
    indices = [json.loads(line)["episode_index"] for line in lines]
    assert sorted(indices) == [0, 1, 2, 3], "every episode of the shard recorded exactly once"

    merged = merge_cli(shards)
    assert merged.returncode == 0, merged.stderr
    assert_merged_like(read_json(shards / "eval_info.json"), read_json(unsharded / "eval_info.json"))


@pytest.mark.slow
def test_local_process_shards_merge_into_the_unsharded_result(local_sweep: Path, reference: dict[str, Any]) -> None:
    assert len(list((local_sweep / ".submitit").iterdir())) >= 3, "one submitit local job per shard"
    assert sorted(shard_files(local_sweep)) == [0, 1, 2]
    assert_merged_like(read_json(local_sweep / "eval_info.json"), reference)


@pytest.mark.slow
def test_a_sweep_over_policies_and_shards_merges_each_policy(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    small = ("env.task=[reach-v3]", "env.obs_type=state", "eval.n_episodes=3", "env.episode_length=50")
    proc = run_eval(*small, "policy=random,metaworld_expert", "eval.shard_id=0,1", out_dir=sweep, multirun=True)
    rows = read_json(sweep / "sweep_summary.json")["combinations"]
    assert sorted(r["combination"] for r in rows) == ["policy=metaworld_expert", "policy=random"]
    for row in rows:
        merged = read_json(sweep / row["eval_info"])
        assert row["eval_info"] == f"{row['combination']}/eval_info.json"
        assert merged["overall"]["n_episodes"] == row["n_episodes"] == 3
        assert [e["episode_index"] for e in merged["episodes"]] == [0, 1, 2]
    assert {r["combination"]: r["pc_success"] for r in rows}["policy=random"] == 0.0
    assert "Sweep summary" in proc.stdout
    assert not (sweep / "eval_info.json").exists()


@pytest.mark.slow
def test_corrupt_and_duplicated_shard_sets_are_refused(local_sweep: Path, tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt"
    shutil.copytree(local_sweep, corrupt)
    (corrupt / "eval_info.json").unlink()
    path = shard_files(corrupt)[1]
    path.write_text(path.read_text()[:200])
    proc = merge_cli(corrupt)
    assert proc.returncode == 1
    assert proc.stderr.strip() == proc.stderr.strip().splitlines()[0], "one line"
    assert f"error: {path} is not valid JSON" in proc.stderr
    assert not (corrupt / "eval_info.json").exists()

    # An episode recorded by two shards (dynamic claims: one that slipped past a lease check): identical copies are
    # one episode, merged once and said; copies that differ are refused, naming both files.
    for copy, differs in (("identical", False), ("different", True)):
        duplicated = tmp_path / copy
        shutil.copytree(local_sweep, duplicated)
        (duplicated / "eval_info.json").unlink()
        files = shard_files(duplicated)
        first = read_json(files[0])
        second = read_json(files[1])
        episode = dict(first["episodes"][0])
        episode["wall_s"] += 1.0  # another run's timing
        episode["steps"] += int(differs)
        second["episodes"].append(episode)
        files[1].write_text(json.dumps(second))
        proc = merge_cli(duplicated)
        unit = f"{episode['task_group']}/0 #{episode['episode_index']}"
        if differs:
            assert proc.returncode == 1
            assert (
                f"episode {unit} appears in shard 0 of 3 ({files[0]}) and in shard 1 of 3 ({files[1]})" in proc.stderr
            )
            assert not (duplicated / "eval_info.json").exists()
        else:
            assert proc.returncode == 0, proc.stderr
            index, task = episode["episode_index"], f"{episode['task_group']}/0"
            assert (
                f"episode {index} of task {task} was recorded twice, identically, in {files[0]} and {files[1]}; "
                "merged once" in proc.stdout
            )
            merged = read_json(duplicated / "eval_info.json")
            assert merged["overall"]["n_episodes"] == read_json(local_sweep / "eval_info.json")["overall"]["n_episodes"]


def test_a_record_outside_its_shards_plan_is_left_out_of_the_merge_with_one_warning(
    local_sweep: Path, tmp_path: Path
) -> None:
    # A line of shard 1's episodes.jsonl copied by hand into shard 0's: the numbers stay those of the sweep.
    copied = tmp_path / "copied"
    shutil.copytree(local_sweep, copied)
    (copied / "eval_info.json").unlink()
    files = shard_files(copied)
    foreign = read_json(files[1])["episodes"][0]
    episodes = files[0].parent / "episodes.jsonl"
    with episodes.open("a", encoding="utf-8") as file:
        file.write(json.dumps(foreign) + "\n")
    proc = merge_cli(copied)
    assert proc.returncode == 0, proc.stderr
    task, index = f"{foreign['task_group']}/{foreign['task_id']}", foreign["episode_index"]
    assert [line for line in proc.stderr.splitlines() if line.startswith("warning:")] == [
        f"warning: {episodes} holds a record of episode {index} of task {task}, outside the plan of shard 0 of 3 "
        "(copied or concatenated by hand?); left out of the merge"
    ], proc.stderr
    assert outcomes(read_json(copied / "eval_info.json")) == outcomes(read_json(local_sweep / "eval_info.json"))


def test_merge_with_a_format_prints_an_unsharded_runs_table_as_compare_does(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_here("env=gym", "env.gym_id=CartPole-v1", "policy=random", "eval.n_episodes=2", out_dir=run)
    proc = merge_cli(run, "--format", "latex")
    assert proc.returncode == 0, proc.stderr
    assert "one unsharded run, nothing to merge" in proc.stderr
    compare = subprocess.run(
        [sys.executable, "-m", "lerobot_hydra.sweeps.compare", "--format", "latex", str(run)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "\\toprule" in proc.stdout and "CartPole-v1" in proc.stdout and proc.stdout == compare.stdout


@pytest.mark.slow
def test_shards_of_a_changed_policy_config_are_refused(tmp_path: Path) -> None:
    """The policy file changes between the runs of a sweep's shards: same overrides, different configuration."""
    conf = tmp_path / "conf" / "policy"
    conf.mkdir(parents=True)
    policy_file = conf / "mine.yaml"
    policy_file.write_text((CONF / "policy" / "metaworld_expert.yaml").read_text())
    sweep = tmp_path / "sweep"
    common = (*WORKLOAD, "policy=mine", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "eval.num_shards=2")

    first = run_eval(*common, "eval.shard_id=0", out_dir=sweep, multirun=True)
    assert "note: 'env.episode_length=50" in first.stderr and "shard 1 of 2 is missing" in first.stderr
    policy_file.write_text(
        "# @package _global_\npolicy:\n  _target_: lerobot_hydra.policies.random.RandomPolicyConfig\n"
        "env:\n  obs_type: state\n"
    )
    second = run_eval(*common, "eval.shard_id=1", out_dir=sweep, multirun=True, check=False)
    assert second.returncode == 1
    differs = re.compile(
        r"shards 0 of 2 in .*; shards 1 of 2 in .* were run with different configurations "
        r"\(differ in: policy\._target_\)"
    )
    assert differs.search(second.stderr), second.stderr
    proc = merge_cli(sweep)
    assert proc.returncode == 1 and differs.search(proc.stderr)
    assert not list(sweep.rglob("eval_info.json"))

    resumed = run_eval(*common, "eval.shard_id=0", out_dir=sweep, multirun=True, check=False)
    assert resumed.returncode == 2
    assert "holds results of a different configuration (differs in: policy._target_)" in resumed.stderr
