"""A dynamic sweep's work queue: files in a directory shared by its shard jobs, safe on NFS.

Only two operations decide anything, and both are atomic on NFS (v3 and later): creating a file with
`O_CREAT | O_EXCL`, and renaming a finished file over its name (core/durable.py). No locks, no database.

    <root>/owners/<token>.json  one per job session: its shard id, host, pid, run dir and measured speed (`_Pace`);
                                its mtime is the lease, renewed by a heartbeat thread every `lease_s / 4` seconds
    <root>/claimed/<block>.<gen> the claim of block <block> (rollout/plan.py `claim_blocks`), holding its owner's
                                token; generation 0 is the first claim, each take-over creates the next one
    <root>/finished/<block>     every episode of the block is recorded (somewhere)

A block belongs to its highest generation's owner while that owner's lease holds: its owner file was touched
within `lease_s` (compared with this job's own file's mtime, just touched, so that every time is the file
server's and clocks need not agree), and on this host its pid is alive. Otherwise any job may take the block over
by creating the next generation; exactly one creation succeeds. The new owner runs the block's episodes that no
earlier owner recorded (it reads their run dirs' episodes.jsonl). An owner checks before recording each episode
that its claim was not taken over (`Claim.lost`) and drops the episode if it was, so a job that wakes up after
losing its lease records nothing more of that block; an episode that slips through that window is recorded twice,
which the merge refuses, naming both files.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from lerobot_hydra.core.durable import write_json_atomic
from lerobot_hydra.core.layout import EPISODES_FILE, QUEUE_CLAIMS_DIR, QUEUE_DONE_DIR, QUEUE_OWNERS_DIR
from lerobot_hydra.core.records import EpisodeKey, TaskKey, read_jsonl
from lerobot_hydra.rollout.plan import TaskBlock


@dataclass(frozen=True)
class Claim:
    index: int
    gen: int
    block: TaskBlock
    root: Path

    def lost(self) -> bool:
        """Whether another job has taken this block over since (a stat; checked before each record)."""
        return (self.root / QUEUE_CLAIMS_DIR / f"{self.index}.{self.gen + 1}").exists()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WorkQueue:
    """One job session's view of the queue at `root`. `regions`: `claim_blocks(...)` of the sweep, the same in
    every job. Use as a context manager: the heartbeat renews this session's lease while it is open."""

    def __init__(
        self, root: Path, regions: list[list[TaskBlock]], shard_id: int, run_dir: Path, lease_s: float
    ) -> None:
        self.root, self.shard_id, self.lease_s = root, shard_id, lease_s
        self.blocks = [b for region in regions for b in region]
        self.region_of = [k for k, region in enumerate(regions) for _ in region]
        self.token = f"{shard_id}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        for sub in (QUEUE_OWNERS_DIR, QUEUE_CLAIMS_DIR, QUEUE_DONE_DIR):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self._owner_path = root / QUEUE_OWNERS_DIR / f"{self.token}.json"
        self._info = {"shard_id": shard_id, "host": socket.gethostname(), "pid": os.getpid(), "dir": str(run_dir)}
        write_json_atomic(self._owner_path, self._info)
        self.rate: float | None = None  # episodes per second this job runs (`report_rate`)
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._renew, name="lerobot_hydra-lease", daemon=True)

    def __enter__(self) -> WorkQueue:
        self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._beat.join()

    def _renew(self) -> None:
        while not self._stop.wait(max(self.lease_s / 4, 0.05)):
            try:
                os.utime(self._owner_path)
            except OSError:  # a hiccup of the file server: the next beat tries again
                pass

    def release(self, reopen: list[Claim]) -> None:
        """Ends this session's lease now (an unhealthy job): every claim it holds may be taken over at once, and the
        blocks of `reopen` that it finished too (with error episodes: the new owner runs them again)."""
        for claim in reopen:
            (self.root / QUEUE_DONE_DIR / str(claim.index)).unlink(missing_ok=True)
        self._stop.set()
        if self._beat.is_alive():
            self._beat.join()
        self._owner_path.unlink(missing_ok=True)

    def report_rate(self, rate: float) -> None:
        """Publishes this job's measured speed (episodes per second) in its owner file, for the others' choices."""
        self.rate = rate
        write_json_atomic(self._owner_path, {**self._info, "rate": rate})

    def _now(self) -> float:
        """The file server's time: this session's owner file, touched now (renewing its lease too)."""
        os.utime(self._owner_path)
        return self._owner_path.stat().st_mtime

    def _owner(self, token: str) -> dict | None:
        try:
            return json.loads((self.root / QUEUE_OWNERS_DIR / f"{token}.json").read_text())
        except (OSError, ValueError):
            return None

    def _expired(self, token: str, now: float) -> bool:
        if token == self.token:
            return False
        path = self.root / QUEUE_OWNERS_DIR / f"{token}.json"
        try:
            # Opened, not just stat'ed: an NFS client revalidates a file's attributes at open (close-to-open
            # consistency), where a stat may answer from its attribute cache, up to a minute old.
            with open(path, "rb") as f:
                if now - os.fstat(f.fileno()).st_mtime > self.lease_s:
                    return True
        except OSError:
            return True
        owner = self._owner(token)
        return owner is None or (owner.get("host") == socket.gethostname() and not _pid_alive(int(owner["pid"])))

    def _state(self) -> tuple[set[int], dict[int, tuple[int, str]]]:
        """(done blocks, block -> (its highest claim generation, that claim's file name))."""
        done = {int(n) for n in os.listdir(self.root / QUEUE_DONE_DIR) if n.isdigit()}
        claims: dict[int, tuple[int, str]] = {}
        for name in os.listdir(self.root / QUEUE_CLAIMS_DIR):
            index, _, gen = name.partition(".")
            if index.isdigit() and gen.isdigit() and int(gen) >= claims.get(int(index), (-1, ""))[0]:
                claims[int(index)] = (int(gen), name)
        return done, claims

    def _token_of(self, name: str, now: float) -> str:
        path = self.root / QUEUE_CLAIMS_DIR / name
        token = path.read_text().strip()
        # A claim whose creator died before writing its token: expired once it is older than a lease.
        if not token and now - path.stat().st_mtime <= self.lease_s:
            return self.token
        return token

    def _create(self, index: int, gen: int) -> Claim | None:
        path = self.root / QUEUE_CLAIMS_DIR / f"{index}.{gen}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return None
        try:
            os.write(fd, self.token.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return Claim(index, gen, self.blocks[index], self.root)

    def _pick(self, candidates: list[int], held: TaskKey | None) -> int:
        """This shard's own region front first; then the back of the held task's blocks; then the back of the
        region with the most unclaimed episodes."""
        own = [i for i in candidates if self.region_of[i] == self.shard_id]
        if own:
            return own[0]
        same = [i for i in candidates if self.blocks[i].key == held]
        if same:
            return same[-1]
        left: dict[int, int] = {}
        for i in candidates:
            left[self.region_of[i]] = left.get(self.region_of[i], 0) + len(self.blocks[i].episodes)
        region = max(sorted(left), key=lambda k: left[k])
        return [i for i in candidates if self.region_of[i] == region][-1]

    def try_claim(self, held: TaskKey | None) -> Claim | bool:
        """One attempt: a Claim; True when every block is done; False when none is free now (others hold them)."""
        done, claims = self._state()
        if len(done) == len(self.blocks):
            return True
        free = [i for i in range(len(self.blocks)) if i not in done and i not in claims]
        if not free:
            now = self._now()
            taken = [i for i in sorted(claims) if i not in done]
            free = [i for i in taken if self._expired(self._token_of(claims[i][1], now), now)]
        leave = _Pace(self, done, claims) if self.rate else None
        while free:  # another job may create the same claim first: then the next candidate, at once
            index = self._pick(free, held)
            if leave is not None and leave(self.blocks[index]):
                free.remove(index)
                continue
            claim = self._create(index, claims[index][0] + 1 if index in claims else 0)
            if claim is not None:
                return claim
            free.remove(index)
        return False

    def next_claim(self, held: TaskKey | None, poll_s: float = 0.5) -> Claim | None:
        """The next block for this job, waiting while every unfinished block is held by a live job (so that the
        blocks of a job that dies are still taken); None once every block is done."""
        while True:
            got = self.try_claim(held)
            if got is True:
                return None
            if isinstance(got, Claim):
                return got
            time.sleep(poll_s)

    def finish(self, claim: Claim) -> None:
        try:
            mark = self.root / QUEUE_DONE_DIR / str(claim.index)
            os.close(os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            pass

    def earlier_dirs(self, claim: Claim, own_dir: Path) -> set[Path]:
        """The run dirs of the claimed block's earlier owners, other than `own_dir`."""
        dirs = set()
        for gen in range(claim.gen):
            try:
                owner = self._owner((self.root / QUEUE_CLAIMS_DIR / f"{claim.index}.{gen}").read_text().strip())
            except OSError:
                continue
            if owner is not None and Path(owner["dir"]) != own_dir:
                dirs.add(Path(owner["dir"]))
        return dirs

    def recorded_elsewhere(self, claim: Claim, own_dir: Path) -> set[EpisodeKey]:
        """The units of the claimed block that the block's earlier owners recorded in their run dirs."""
        return self.recorded_in(claim, self.earlier_dirs(claim, own_dir))

    def recorded_in(self, claim: Claim, dirs: set[Path]) -> set[EpisodeKey]:
        """The units of the claimed block recorded in the run dirs `dirs`; error episodes left out (the new owner runs
        them again, and the merge keeps its record: sweeps/shards.py)."""
        block = claim.block
        units: set[EpisodeKey] = set()
        for run_dir in dirs:
            for record in read_jsonl(run_dir / EPISODES_FILE):
                if record.unit[:2] == block.key and record.unit[2] in block.episodes and not record.errored:
                    units.add(record.unit)
        return units


class _Pace:
    """Whether this job should leave a block to the others: it would end it later than they could, near the end.
    With `U` the episodes nobody claimed and `C` the other live jobs' summed speeds, a job of speed `r` takes a block
    of `n` episodes while `n / r <= U / C` (the others have work until then anyway); otherwise only if it would end
    the block before any other job could: that job's current block ends, then it runs this one at its speed. So a
    slow job does not start a block late that holds everyone back, and the last blocks go to the fastest jobs."""

    def __init__(self, queue: WorkQueue, done: set[int], claims: dict[int, tuple[int, str]]) -> None:
        self.queue, self.done, self.claims = queue, done, claims
        self._others: tuple[dict[str, float], dict[str, float]] | None = None

    def _measure(self) -> tuple[dict[str, float], dict[str, float]]:
        """(live other jobs' speeds, seconds until each one's latest block ends)."""
        q, now = self.queue, self.queue._now()
        rates = {}
        for name in os.listdir(q.root / QUEUE_OWNERS_DIR):
            token = name.removesuffix(".json")
            owner = q._owner(token) if token != q.token and not q._expired(token, now) else None
            if owner is not None and float(owner.get("rate") or 0) > 0:
                rates[token] = float(owner["rate"])
        busy: dict[str, float] = {}
        for index, (_, name) in self.claims.items():
            if index in self.done:
                continue
            try:
                token, started = q._token_of(name, now), (q.root / QUEUE_CLAIMS_DIR / name).stat().st_mtime
            except OSError:
                continue
            if token in rates:
                left = started + len(q.blocks[index].episodes) / rates[token] - now
                busy[token] = max(busy.get(token, 0.0), left, 0.0)
        return rates, busy

    def __call__(self, block: TaskBlock) -> bool:
        q = self.queue
        assert q.rate is not None
        if self._others is None:
            self._others = self._measure()
        rates, busy = self._others
        if not rates:
            return False
        n = len(block.episodes)
        unclaimed = sum(len(b.episodes) for i, b in enumerate(q.blocks) if i not in self.done and i not in self.claims)
        if n / q.rate <= unclaimed / sum(rates.values()):
            return False
        return n / q.rate > min(busy.get(t, 0.0) + n / r for t, r in rates.items())
