"""The dynamic work queue (store/queue.py) with real processes: concurrent claims are exclusive and cover every
block once; a wedged job (SIGSTOP) loses its lease and learns so when it wakes; a killed job's block is taken over
at once, with the episodes it recorded left out."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

from lerobot_hydra.core.layout import EPISODES_FILE, QUEUE_DONE_DIR
from lerobot_hydra.core.records import EpisodeRecord, append_jsonl
from lerobot_hydra.rollout.plan import TaskBlock, claim_blocks
from lerobot_hydra.store.queue import Claim, WorkQueue

KEYS = [("g", 0), ("g", 1), ("g", 2)]
ONE_BLOCK = [[TaskBlock("g", 0, 0, 3)]]
DEADLINE_S = 120  # a failure bound only: every wait below ends as soon as its condition holds


def _wait_for(condition, what: str) -> None:
    end = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.02)


def _drain(root: str, shard_id: int, out: str) -> None:
    regions = claim_blocks(KEYS, 10, 4)
    got = []
    with WorkQueue(Path(root), regions, shard_id, Path(out).parent, lease_s=60) as queue:
        held = None
        while (claim := queue.next_claim(held, poll_s=0.01)) is not None:
            got.append([claim.index, claim.gen])
            queue.finish(claim)
            held = claim.block.key
    Path(out).write_text(json.dumps(got))


def _hold(root: str, run_dir: str, lease_s: float, status: str) -> None:
    """Claims the only block, records its episode 0, says so, then waits to be told to check its claim."""
    with WorkQueue(Path(root), ONE_BLOCK, 0, Path(run_dir), lease_s) as queue:
        claim = queue.next_claim(None, poll_s=0.01)
        assert claim is not None
        append_jsonl(Path(run_dir) / EPISODES_FILE, EpisodeRecord("g", 0, "t", "t", 0, 0, True, 1.0, 1.0, 3, 0.1))
        Path(status).write_text("claimed")
        _wait_for(lambda: Path(status + ".check").exists(), "the check request")
        Path(status).write_text("lost" if claim.lost() else "held")


def _start(target, *args) -> mp.Process:
    process = mp.get_context("spawn").Process(target=target, args=args)
    process.start()
    return process


def test_concurrent_jobs_claim_every_block_once(tmp_path: Path) -> None:
    root = tmp_path / "queue"
    outs = [tmp_path / f"s{k}" / "claims.json" for k in range(4)]
    for out in outs:
        out.parent.mkdir()
    jobs = [_start(_drain, str(root), k, str(out)) for k, out in enumerate(outs)]
    for job in jobs:
        job.join(DEADLINE_S)
        assert job.exitcode == 0
    claimed = [tuple(c) for out in outs for c in json.loads(out.read_text())]
    n_blocks = sum(len(r) for r in claim_blocks(KEYS, 10, 4))
    assert sorted(i for i, _ in claimed) == list(range(n_blocks))
    assert {gen for _, gen in claimed} == {0}
    assert sorted(os.listdir(root / QUEUE_DONE_DIR), key=int) == [str(i) for i in range(n_blocks)]


def test_a_wedged_job_loses_its_lease_and_records_nothing_after(tmp_path: Path) -> None:
    root, run_dir, status = tmp_path / "queue", tmp_path / "a", tmp_path / "status"
    run_dir.mkdir()
    holder = _start(_hold, str(root), str(run_dir), 0.5, str(status))
    _wait_for(lambda: status.exists() and status.read_text() == "claimed", "the first claim")
    os.kill(holder.pid, signal.SIGSTOP)  # wedged: neither its work nor its heartbeat goes on
    try:
        with WorkQueue(root, ONE_BLOCK, 1, tmp_path / "b", lease_s=0.5) as other:
            got: list[Claim] = []
            _wait_for(lambda: isinstance(c := other.try_claim(None), Claim) and not got.append(c), "the take-over")
            assert (got[0].index, got[0].gen) == (0, 1)
            assert other.recorded_elsewhere(got[0], tmp_path / "b") == {("g", 0, 0)}
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    Path(str(status) + ".check").write_text("")
    holder.join(DEADLINE_S)
    assert holder.exitcode == 0
    assert status.read_text() == "lost"


def test_a_killed_jobs_block_is_taken_over_at_once(tmp_path: Path) -> None:
    root, run_dir, status = tmp_path / "queue", tmp_path / "a", tmp_path / "status"
    run_dir.mkdir()
    holder = _start(_hold, str(root), str(run_dir), 3600.0, str(status))
    _wait_for(lambda: status.exists() and status.read_text() == "claimed", "the first claim")
    with WorkQueue(root, ONE_BLOCK, 1, tmp_path / "b", lease_s=3600.0) as other:
        assert other.try_claim(None) is False  # a live job's lease holds
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(DEADLINE_S)
    # Its lease would hold for an hour, but its pid on this host is gone: the block is free now.
    with WorkQueue(root, ONE_BLOCK, 1, tmp_path / "b", lease_s=3600.0) as other:
        claim = other.try_claim(None)
        assert isinstance(claim, Claim) and claim.gen == 1
        assert other.recorded_elsewhere(claim, tmp_path / "b") == {("g", 0, 0)}
        assert other.try_claim(None) is False  # held by this job now
        other.finish(claim)
        assert other.try_claim(None) is True  # every block done


def test_a_slow_job_leaves_the_last_blocks_to_a_faster_one(tmp_path: Path) -> None:
    """Near the end a job that would end a block after a faster job could (its current block ended first) leaves
    it; with work enough for the others it takes its blocks as before."""
    one = [TaskBlock("g", 0, k, k) for k in range(3)]
    slow = WorkQueue(tmp_path / "q", [one[:1], one[1:]], 0, tmp_path / "a", lease_s=60)
    fast = WorkQueue(tmp_path / "q", [one[:1], one[1:]], 1, tmp_path / "b", lease_s=60)
    slow.report_rate(0.2)  # 5 s an episode
    fast.report_rate(1.0)  # 1 s an episode
    running = fast.try_claim(None)
    assert isinstance(running, Claim) and running.index == 1
    # Two 1-episode blocks left: the fast job ends its block in ~1 s and one more in ~2 s, before the slow one's 5 s.
    assert slow.try_claim(None) is False
    fast.finish(running)
    second = fast.try_claim(("g", 0))
    assert isinstance(second, Claim) and second.index in (0, 2)
    # With many blocks left for the fast job the slow one takes its own as soon as it asks.
    many = [TaskBlock("g", 0, k, k) for k in range(40)]
    slow = WorkQueue(tmp_path / "q2", [many[:20], many[20:]], 0, tmp_path / "a", lease_s=60)
    fast = WorkQueue(tmp_path / "q2", [many[:20], many[20:]], 1, tmp_path / "b", lease_s=60)
    slow.report_rate(0.2)
    fast.report_rate(1.0)
    assert isinstance(fast.try_claim(None), Claim)
    got = slow.try_claim(None)
    assert isinstance(got, Claim) and got.index == 0
