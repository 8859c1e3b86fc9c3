"""A run dir under stress, for real: two processes in one dir, kills of whole process groups, torn and
corrupt files, concurrent writers, and plans of MT50 x 20,000 episodes."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, outcome, read_episodes, read_json, run_eval, run_here
from tests.sweeps.test_sharding import merge_cli

# The random policy on one task: every episode runs its full length, so a run lasts long enough to act on it.
RANDOM = ("env.task=[reach-v3]", "policy=random", "env.obs_type=state", "eval.batch_size=1")
# Two small shards run by hand into sibling dirs.
SMALL = ("env.task=[reach-v3,push-v3]", "eval.n_episodes=2", "env.episode_length=20", "eval.batch_size=1")


def start_eval(out_dir: Path, *overrides: str) -> subprocess.Popen[bytes]:
    """eval.py in the background, in its own process group (as SLURM runs a job)."""
    args = [sys.executable, str(ROOT / "eval.py"), f"hydra.run.dir={out_dir}", "eval.max_episodes_rendered=0"]
    return subprocess.Popen(
        [*args, *overrides], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before the test could act on it"
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.02)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the whole process group, as SLURM and the OOM killer do."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def recorded(run_dir: Path) -> int:
    path = run_dir / "episodes.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def hold_lock(directory: Path, what: str) -> subprocess.Popen[str]:
    """Another process that holds `directory`'s lock until it is killed."""
    code = (
        "import sys, time; from pathlib import Path; from lerobot_hydra.store.lock import DirLock; "
        f"DirLock(Path(sys.argv[1]), {what!r}).acquire(); print('locked', flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(directory)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def merge_while_locked(sweep_dir: Path, locked: Path, what: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """lerobot-hydra-merge of `sweep_dir` while another process holds the lock of `locked`; and that one's pid."""
    holder = hold_lock(locked, what)
    try:
        return merge_cli(sweep_dir), holder.pid
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SMALL as shard 0 and 1 of 2, run by hand into runs/s0 and runs/s1."""
    runs = tmp_path_factory.mktemp("runs")
    for k in (0, 1):
        run_here(*SMALL, f"eval.shard_id={k}", "eval.num_shards=2", out_dir=runs / f"s{k}")
    return runs


@pytest.mark.slow
def test_a_second_process_is_refused_and_a_dead_holders_lock_is_taken_over(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    workload = (*RANDOM, "eval.n_episodes=40", "env.episode_length=500")  # ~20 s: the second starts meanwhile
    first = start_eval(run_dir, *workload)
    try:
        wait_for(lambda: recorded(run_dir) >= 1, first)
        second = run_eval(*workload, out_dir=run_dir, check=False)
        first_ran_throughout = first.poll() is None
    finally:
        kill_group(first)
    assert second.returncode == 2, second.stdout + second.stderr
    assert first_ran_throughout, "the first run should still be running while the second tries"
    errors = [line for line in second.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(f"error: {run_dir} is in use by an evaluation (pid {first.pid} ")

    resumed = run_eval(*workload, out_dir=run_dir)
    assert f"took over the lock of {run_dir} from an evaluation (pid {first.pid} " in resumed.stdout + resumed.stderr
    units = [(r["task_group"], r["episode_index"]) for r in read_episodes(run_dir)]
    assert len(units) == len(set(units)) == 40, "every episode recorded once"
    assert not (run_dir / ".lerobot_hydra.lock").exists(), "a run that ends lets go of its dir"


def test_the_merge_waits_for_running_shards_and_for_other_merges(two_shards: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    subprocess.run(["cp", "-r", str(two_shards), str(runs)], check=True)
    proc, pid = merge_while_locked(runs, runs / "s1", "an evaluation")
    assert proc.returncode == 1
    assert f"shard 1 of 2 is still running in {runs / 's1'} (an evaluation (pid {pid} " in proc.stderr
    assert not (runs / "eval_info.json").exists()

    proc, pid = merge_while_locked(runs, runs, "a merge")
    assert proc.returncode == 1
    assert f"error: {runs} is in use by a merge (pid {pid} " in proc.stderr
    assert not (runs / "eval_info.json").exists()

    assert merge_cli(runs).returncode == 0
    assert read_json(runs / "eval_info.json")["overall"]["n_episodes"] == 4


def _write_many(path: str, writer: int, count: int, errors: Any) -> None:
    from lerobot_hydra.core.durable import write_json_atomic

    for n in range(count):
        try:
            write_json_atomic(Path(path), {"writer": writer, "n": n, "pad": "x" * 50_000})
        except Exception as err:  # noqa: BLE001 - reported to the test
            errors.put(repr(err))
            return


def test_concurrent_atomic_writers_never_fail_nor_tear_the_file(tmp_path: Path, monkeypatch: Any) -> None:
    from lerobot_hydra.core import durable

    path = tmp_path / "data.json"
    durable.write_json_atomic(path, {"writer": -1, "n": 0, "pad": ""})
    ctx = multiprocessing.get_context("spawn")
    errors = ctx.Queue()
    writers = [ctx.Process(target=_write_many, args=(str(path), i, 200, errors)) for i in range(2)]
    for writer in writers:
        writer.start()
    torn = 0
    while any(w.is_alive() for w in writers):
        try:
            data = json.loads(path.read_text())
            assert set(data) == {"writer", "n", "pad"}
        except json.JSONDecodeError:
            torn += 1
    for writer in writers:
        writer.join()
    failures = [errors.get() for _ in range(errors.qsize())]
    assert not failures, failures
    assert torn == 0
    assert [p.name for p in tmp_path.iterdir()] == ["data.json"], "no temporary file is left"

    synced: list[bool] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.path.isdir(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    durable.write_json_atomic(path, {"final": True})
    assert False in synced and True in synced, "the file and its directory are both fsynced"


def test_a_corrupt_shard_file_is_rebuilt_from_the_records_never_deleted(two_shards: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    subprocess.run(["cp", "-r", str(two_shards), str(runs)], check=True)
    shard_file = runs / "s1" / "shard_1_of_2.json"
    records_before = (runs / "s1" / "episodes.jsonl").read_text()
    shard_file.write_text(shard_file.read_text()[:200])  # e.g. a disk fault or an edit
    proc = merge_cli(runs)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and f"error: {shard_file} is not valid JSON" in errors[0], proc.stderr
    assert "delete" not in errors[0] and "re-run that shard in place" in errors[0]
    command = shlex.split(errors[0].split("keeps every recorded episode: ", 1)[1])
    assert command[:2] == ["python", "eval.py"]
    rerun = subprocess.run(
        [sys.executable, str(ROOT / "eval.py"), *command[2:]], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr
    log = rerun.stdout + rerun.stderr
    assert f"{shard_file} was unreadable" in log and "rebuilt it from episodes.jsonl (2 episodes recorded)" in log
    assert "2 episodes already recorded, 0 to run" in log
    assert (runs / "s1" / "episodes.jsonl").read_text() == records_before, "the records are kept as they were"
    assert merge_cli(runs).returncode == 0
    merged = read_json(runs / "eval_info.json")
    again = tmp_path / "again"
    subprocess.run(["cp", "-r", str(two_shards), str(again)], check=True)
    assert merge_cli(again).returncode == 0
    assert [outcome(r) for r in merged["episodes"]] == [
        outcome(r) for r in read_json(again / "eval_info.json")["episodes"]
    ]


@pytest.mark.slow
def test_a_killed_run_resumes_without_its_half_written_videos_and_counts_its_time(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    workload = (*RANDOM, "eval.n_episodes=6", "env.episode_length=500")
    small_frames = ("env.observation_height=64", "env.observation_width=64")
    killed = start_eval(run_dir, *workload, *small_frames, "eval.max_episodes_rendered=6")
    shard_file = run_dir / "shard_0_of_1.json"
    try:
        wait_for(shard_file.exists, killed)
        started = time.monotonic()  # no later than the run's clock started
        wait_for(lambda: time.monotonic() - started >= 7 and any(run_dir.glob("videos/*/.*.part")), killed)
        killed_s = time.monotonic() - started
    finally:
        kill_group(killed)
    parts = list(run_dir.glob("videos/*/.*.part"))
    assert parts, "the kill should land while a video is being written"

    resumed = run_eval(*workload, *small_frames, "eval.max_episodes_rendered=0", out_dir=run_dir)
    assert "half-written file(s) a killed run left in" in resumed.stdout + resumed.stderr
    assert not any(p.exists() for p in parts) and not list(run_dir.rglob("*.part"))
    sessions = read_json(run_dir / "sessions.json")["sessions"]
    assert len(sessions) == 2
    assert sessions[0]["eval_s"] >= killed_s - 5.0, "the killed session's time is lost only since its last heartbeat"
    info = read_json(run_dir / "eval_info.json")
    assert info["overall"]["eval_s"] == pytest.approx(sum(s["eval_s"] for s in sessions), abs=0.01)
    assert info["overall"]["n_episodes"] == 6


def _orphan_semaphores() -> set[str]:
    """Named semaphores in /dev/shm that no live process has mapped: leaked."""
    names = {p.name for p in Path("/dev/shm").glob("sem.*")}
    mapped = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            mapped.update(line.rsplit("/", 1)[1] for line in maps.read_text().splitlines() if "/dev/shm/sem." in line)
        except OSError:
            continue
    return names - mapped


def _group_semaphores(pgid: int) -> set[str]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            maps = (stat.parent / "maps").read_text().splitlines()
        except (OSError, IndexError, ValueError):
            continue
        found.update(line.rsplit("/", 1)[1] for line in maps if "/dev/shm/sem." in line)
    return found


def test_killing_an_async_runs_process_group_leaks_no_semaphores(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    before = _orphan_semaphores()
    proc = start_eval(run_dir, *RANDOM[:-1], "eval.batch_size=2", "eval.n_episodes=20", "env.episode_length=200")
    try:
        wait_for(lambda: recorded(run_dir) >= 1, proc)
        in_use = _group_semaphores(proc.pid)
    finally:
        kill_group(proc)
    time.sleep(1)  # the workers die with the group
    leaked = _orphan_semaphores() - before
    assert not leaked, f"the killed run left {sorted(leaked)} in /dev/shm"
    assert not in_use, f"the run's processes held named semaphores {sorted(in_use)}"


def test_an_mt50_plan_of_20000_episodes_per_task_is_stored_in_a_few_kilobytes(tmp_path: Path) -> None:
    from lerobot_hydra.core.records import EpisodeRecord
    from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig
    from lerobot_hydra.rollout.plan import TaskBlock, shard_plan
    from lerobot_hydra.run.work import plan_work
    from lerobot_hydra.store.run_store import RunStore

    tasks = MetaWorldEnvConfig(task="all").tasks()
    keys = [t.key for t in tasks]
    assert len(keys) == 50
    plan = shard_plan(keys, 20_000, 1, 3)  # shard 1 of 3: the end of task 16, tasks 17-32, the start of task 33
    assert [b.key for b in plan] == keys[16:34]
    assert plan[0] == TaskBlock(*keys[16], 13_334, 19_999) and plan[-1] == TaskBlock(*keys[33], 0, 6_666)
    with RunStore(tmp_path, {"n_episodes": 20_000}, 1, 3, tasks, plan, "") as store:
        header_bytes = store.path.stat().st_size
        task = tasks[16]
        for k in (13_334, 13_335):
            store.add(
                EpisodeRecord(
                    task.task_group, task.task_id, task.name, task.description, k, 1000 + k, True, 1.0, 1.0, 5, 0.1
                )
            )
        work = plan_work(tasks, plan, store)
        assert store.path.stat().st_size == header_bytes, "records go to episodes.jsonl while running"
    assert header_bytes < 16_000, f"the plan of 333,333 episodes took {header_bytes} bytes"
    assert sum(len(w.episodes) for w in work) == 333_333 - 2
    assert work[0].episodes[0] == 13_336 and work[0].done == 2 and work[0].successes == 2
    saved = read_json(store.path)
    assert saved["complete"] is False and saved["plan"][0] == {
        "task_group": task.task_group,
        "task_id": task.task_id,
        "first": 13_334,
        "last": 19_999,
    }


def test_the_merge_refuses_shard_files_of_another_format_clearly(two_shards: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    subprocess.run(["cp", "-r", str(two_shards), str(runs)], check=True)
    old = runs / "s1" / "shard_1_of_2.json"
    data = read_json(old)
    old.write_text(json.dumps({**data, "format": "lerobot_hydra.shard/1"}))
    foreign = runs / "elsewhere" / "shard_0_of_1.json"
    foreign.parent.mkdir()
    foreign.write_text(json.dumps({"format": "somebody-else/3"}))
    proc = merge_cli(runs)
    assert proc.returncode == 1
    assert (
        f"error: {old} was written by another version of lerobot_hydra (format lerobot_hydra.shard/1, this one reads "
        "lerobot_hydra.shard/2); merge it with the version that wrote it, or move it out of the sweep dir"
    ) in proc.stderr
    assert f"error: {foreign} is not a lerobot_hydra.shard/2 file" in proc.stderr
    assert not (runs / "eval_info.json").exists()


def test_a_shard_run_twice_is_refused_naming_the_copy_to_keep_never_advising_deletion(
    two_shards: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    subprocess.run(["cp", "-r", str(two_shards), str(runs)], check=True)
    subprocess.run(["cp", "-r", str(runs / "s1"), str(runs / "s1_again")], check=True)
    again = runs / "s1_again" / "shard_1_of_2.json"
    data = read_json(again)
    again.write_text(json.dumps({**data, "complete": False, "episodes": data["episodes"][:1]}))  # e.g. killed
    proc = merge_cli(runs)
    assert proc.returncode == 1
    assert "was run 2 times with the same configuration" in proc.stderr, proc.stderr
    assert f"keep {runs / 's1'}, move the other copies out of {runs}" in proc.stderr
    assert "delete" not in proc.stderr
