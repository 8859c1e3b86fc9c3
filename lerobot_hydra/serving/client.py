"""`policy=remote`: a policy served by a policy server (`lerobot-hydra-serve`, or any openpi-compatible server).

Each batch row keeps its own action queue here, so only the rows whose queue is empty ask the server for a
chunk. Against our server (its metadata names our extension, wire.py) all such rows of a step go in one
message with their raw observation history, episode seed and noise state (chunks.py computes them as
in-process evaluation would); against an openpi server each row is one request of one observation (its env keys,
and its task text as `prompt`), whose reply's `actions` (chunk, action_dim) are queued whole. On a real-time
`eval.clock` each row's queue follows LeRobot's async-inference rules (policies/clock.py), a chunk charged the
request's wall time under `measured` (the network and the server's queueing included).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.policies.base import DeclaresReads, PolicyConfig, RunsOnClock, rtc_join_refusal
from lerobot_hydra.policies.clock import Clock, RowTiming, TimedRow, noop_rows
from lerobot_hydra.schemas.clock import ClockConfig
from lerobot_hydra.serving.connection import Access, Connection
from lerobot_hydra.serving.replies import checked_actions, checked_metadata, checked_noise
from lerobot_hydra.serving.wire import EXTENSION_KEY, METADATA_KEY, PROTOCOL_VERSION

log = logging.getLogger("lerobot_hydra")


@dataclass
class RemotePolicyConfig(PolicyConfig):
    # Where the server is and how long to wait for it: the served policy's identity is the fingerprint's.
    OUTCOME_NEUTRAL = frozenset({"url", "connect_timeout_s", "api_key_file", "tls_cert"})

    # ws://host:port, or the path of the announce file a server writes once it listens (serve.announce).
    url: str = ""
    # How long to wait for the server (its announce file, its port) before giving up.
    connect_timeout_s: float = 300.0
    # A file holding the server's API key; else $LEROBOT_HYDRA_API_KEY, else the key in the announce file.
    api_key_file: str | None = None
    # The certificate to trust for a wss:// server; else the one the announce file names, else the system's CAs.
    tls_cert: str | None = None

    @property
    def access(self) -> Access:
        return Access(self.api_key_file, self.tls_cert)

    @cached_property
    def server(self) -> dict[str, Any] | None:
        """Our server's description from its metadata, or None for an openpi server (asked once)."""
        if not self.url:
            raise UserError("policy.url is empty; give ws://<host>:<port> or the path of a server's announce file")
        if self.connect_timeout_s <= 0:
            raise UserError(f"policy.connect_timeout_s must be positive, got {self.connect_timeout_s}")
        connection = Connection(self.url, self.connect_timeout_s, self.access)
        connection.close()
        ours = connection.metadata.get(METADATA_KEY)
        if isinstance(ours, dict) and ours.get("version") != PROTOCOL_VERSION:
            raise UserError(
                f"the policy server at {connection.url} speaks protocol version {ours.get('version')}, this client "
                f"{PROTOCOL_VERSION}; run the same lerobot_hydra version on both sides"
            )
        return checked_metadata(ours, connection.url) if isinstance(ours, dict) else None

    def completed_unbuilt(self) -> None:
        if self.server is None:
            return
        try:
            connection = Connection(self.url, self.connect_timeout_s, self.access)
        except UserError as err:  # every episode is recorded: the run succeeded all the same
            log.warning("could not tell the policy server that this run completed: %s", err)
            return
        tell_done(connection, client_id())
        connection.close()

    def reads(self, env: EnvConfig) -> set[str] | None:
        return None if self.server is None else set(self.server["reads"])

    def identity(self) -> dict[str, Any] | None:
        """The served policy's identity (its config, checkpoint and packages), so that shards served different
        weights are never merged; an openpi server tells nothing, so only its url is recorded."""
        return {"served": self.server["identity"]} if self.server is not None else {"openpi_server": self.url}

    def resets_rows(self) -> bool:
        return True

    def clock_refusal(self, clock: ClockConfig) -> str | None:
        # Each row's queue runs on the clock here, its latency the request's (docs/timing.md); the server takes no
        # leftover to guide a chunk towards.
        return rtc_join_refusal(clock, "a served policy")

    def build(self, env: EnvConfig, device: str) -> RemotePolicy:
        from lerobot_hydra.policies.lerobot.features import env_observation_features

        _, action_space = env.spaces(env.tasks()[0])
        action_dim = int(np.prod(action_space.shape))
        if self.server is not None:
            # A server built for another env: said here in one line, rather than as a failed request.
            missing = sorted(set(self.server["reads"]) - set(env_observation_features(env)))
            served_dim = self.server.get("action_dim")
            if missing or (served_dim is not None and served_dim != action_dim):
                problem = (
                    f"reads {', '.join(missing)}, which this env does not produce"
                    if missing
                    else (f"acts in {served_dim} dimensions, this env in {action_dim}")
                )
                raise UserError(
                    f"the policy served at {self.url} {problem}; start the server with the env settings of the "
                    "evaluation (env=..., env.obs_type=...)"
                )
        return RemotePolicy(self.url, self.connect_timeout_s, self.server, action_dim, self.access)


def client_id() -> str:
    """Names a run's client in its `done` message: serve.shards counts distinct ones."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def tell_done(connection: Connection, client: str) -> None:
    try:
        reply = connection.request({EXTENSION_KEY: "done", "client": client})
    except UserError as err:  # every episode is recorded: the run succeeded all the same
        log.warning("could not tell the policy server that this run completed: %s", err)
        return
    if reply.get("ok") is False:
        log.warning(
            "the policy server at %s did not count this run as completed (serve.shards): this client did not present "
            "its API key; read it from the announce file, policy.api_key_file or $LEROBOT_HYDRA_API_KEY",
            connection.url,
        )


@dataclass
class Row:
    seed: int | None
    history: deque[dict[str, np.ndarray]]
    actions: deque[np.ndarray] = field(default_factory=deque)  # lockstep: its queue
    noise: bytes | None = None  # the server's noise generator state after this row's last chunk
    timed: TimedRow | None = None  # a real-time eval.clock: its queue, in place of `actions`
    timing: RowTiming = field(default_factory=RowTiming)  # lockstep: its requests' wall times

    @property
    def idle(self) -> bool:
        return self.seed is None

    def wants_chunk(self) -> bool:
        """At the start of a step: whether the row asks for a chunk now (a chunk in flight may join first)."""
        if self.timed is None:
            return not self.actions
        self.timed.arrive()
        return self.timed.wants_chunk()

    def receive(self, chunk: Sequence[np.ndarray], wall_ms: float) -> None:
        """A chunk the server returned after `wall_ms` (the request's wall time, the server's queueing included)."""
        if self.timed is not None:
            self.timed.request(list(chunk), wall_ms)
        else:
            self.timing.add(0, None, wall_ms)
            self.actions.extend(chunk)

    def pop(self) -> np.ndarray:
        return self.timed.pop() if self.timed is not None else self.actions.popleft()


class RemotePolicy(RunsOnClock, DeclaresReads):
    def __init__(
        self, url: str, timeout_s: float, server: dict[str, Any] | None, action_dim: int, access: Access | None = None
    ) -> None:
        self.url, self.timeout_s, self.server, self.action_dim = url, timeout_s, server, action_dim
        self.access = access or Access()
        self.connection = Connection(url, timeout_s, self.access)
        self.rows: list[Row] = []
        self.task: TaskSpec | None = None
        self.client = client_id()  # its forks share it
        self.forks: list[RemotePolicy] = []  # the lanes' policies (eval.max_parallel_tasks), closed with this one
        self.clock: Clock | None = None

    def use_clock(self, clock: Clock) -> None:
        self.clock = clock if clock.real_time else None

    def row_timing(self, row: int) -> dict[str, Any] | None:
        state = self.rows[row]
        return None if state.idle else (state.timed.timing if state.timed is not None else state.timing).fields()

    def noop_rows(self) -> list[int]:
        return noop_rows([row.timed for row in self.rows])

    def _row(self, seed: int | None, task: TaskSpec) -> Row:
        timed = TimedRow(self.clock, seed, task.name) if self.clock is not None and seed is not None else None
        return Row(seed, deque(maxlen=self.server["history"] if self.server is not None else 1), timed=timed)

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        self.task = task
        self.rows = [self._row(seed, task) for seed in episode_seeds]

    def reset_slots(self, task: TaskSpec, seeds: dict[int, int | None]) -> None:
        for row, seed in seeds.items():
            self.rows[row] = self._row(seed, task)

    def select_action(self, batch: dict[str, Any]) -> np.ndarray:
        keys = sorted(self.server["reads"]) if self.server is not None else sorted(k for k in batch if k != "task")
        tasks = batch.get("task")
        tasks = [tasks] * len(self.rows) if isinstance(tasks, str) or tasks is None else list(tasks)
        needing = []
        for i, row in enumerate(self.rows):
            if row.idle:
                continue
            observation = {key: np.asarray(batch[key][i]) for key in keys if key in batch}
            # As LeRobot's populate_queues: an episode's first observation fills the whole history.
            row.history.extend([observation] * (row.history.maxlen or 1) if not row.history else [observation])
            if row.wants_chunk():
                needing.append(i)
        if needing and self.server is not None:
            limit = int(self.server["max_batch_size"])
            for start in range(0, len(needing), limit):
                self._chunks(needing[start : start + limit], [str(t) for t in tasks])
        for i in needing if self.server is None else []:
            self._openpi_chunk(i, str(tasks[i]) if tasks[i] is not None else "")
        zeros = np.zeros(self.action_dim, dtype=np.float32)
        return np.stack([zeros if row.idle else row.pop() for row in self.rows])

    def reads_next(self) -> list[bool]:
        """A row's next chunk stacks its last `history` observations: the coming step's is read when the row's
        queue holds fewer actions than that (on a real-time clock a row may ask at any step: always)."""
        if self.clock is not None:
            return [not row.idle for row in self.rows]
        return [not row.idle and len(row.actions) < (row.history.maxlen or 1) for row in self.rows]

    def _chunks(self, rows: list[int], tasks: list[str]) -> None:
        picked = [self.rows[i] for i in rows]
        keys = picked[0].history[0].keys()
        frames = {key: np.stack([np.stack([frame[key] for frame in row.history]) for row in picked]) for key in keys}
        message = {
            EXTENSION_KEY: "chunks",
            "frames": frames,
            "task": [tasks[i] for i in rows],
            "seed": [row.seed for row in picked],
            "noise": [row.noise for row in picked],
        }
        start = time.perf_counter()
        reply = self.connection.request(message)
        wall_ms = 1000.0 * (time.perf_counter() - start)
        url = self.connection.url
        actions = checked_actions(reply.get("actions"), url, len(picked), self.action_dim)
        for row, chunk, noise in zip(picked, actions, checked_noise(reply.get("noise"), url, len(picked)), strict=True):
            row.receive(chunk, wall_ms)
            row.noise = noise

    def _openpi_chunk(self, i: int, task: str) -> None:
        observation = {**self.rows[i].history[-1], "prompt": task}
        start = time.perf_counter()
        actions = self.connection.request(observation).get("actions")
        wall_ms = 1000.0 * (time.perf_counter() - start)
        self.rows[i].receive(checked_actions(actions, self.connection.url, None, self.action_dim), wall_ms)

    def finish(self) -> None:
        """The run completed: tell our server (its serve.shards counts such clients), then disconnect."""
        if self.server is not None:
            tell_done(self.connection, self.client)
        self.close()

    def close(self) -> None:
        for policy in [self, *self.forks]:
            policy.connection.close()

    def fork(self) -> RemotePolicy:
        """Its own connection (a websocket serves one thread), the same client."""
        forked = RemotePolicy(self.url, self.timeout_s, self.server, self.action_dim, self.access)
        forked.client, forked.clock = self.client, self.clock
        self.forks.append(forked)
        return forked
