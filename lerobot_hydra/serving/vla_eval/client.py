"""`policy=vla_eval`: a vla-eval model server (OpenVLA, pi0, GR00T, CogACT, starVLA, LeRobot checkpoints, ...)
evaluated here, on LIBERO, MetaWorld or PushT, with this project's batching, shards and statistics.

Each batch row has its own session (a connection: session.py), as vla-eval's server keeps one episode per
connection. Per step, every running row sends its observation (conventions.py), all rows before any reply is
read, so that a batching server sees them together; each gets one action back (the server buffers its chunks),
applied as the env's convention says. A row's episode start and end are the session's EPISODE_START and
EPISODE_END. A server's ERROR fails the row's episode as a simulator fault does: it runs once more, then is
recorded as an error episode (rollout/episode_errors.py). The server is asked once, before any simulator starts,
for its HELLO: its protocol version, what it asks the env for and its declared specs, which must fit the env's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.policies.base import PolicyConfig, RowResettablePolicy
from lerobot_hydra.processors.observation import RAW_KEY
from lerobot_hydra.serving.vla_eval.conventions import Convention, convention_for
from lerobot_hydra.serving.vla_eval.session import ServerError, Session
from lerobot_hydra.serving.vla_eval.specs import check_specs
from lerobot_hydra.serving.vla_eval.wire import IMAGE_FORMATS
from lerobot_hydra.vector.faults import SubEnvFailed


@dataclass
class VlaEvalPolicyConfig(PolicyConfig):
    OUTCOME_NEUTRAL = frozenset({"url", "connect_timeout_s", "timeout_s"})

    # ws://host:port of the model server (vla-eval's `--address`).
    url: str = ""
    # How long to wait for the server to listen, and for each of its answers.
    connect_timeout_s: float = 300.0
    timeout_s: float = 120.0
    # How images travel: png (vla-eval's default, lossless), jpeg (quality 95, lossy) or raw.
    image_format: str = "png"

    def __post_init__(self) -> None:
        if not self.url.startswith(("ws://", "wss://")):
            raise UserError(f"policy.url must be ws://<host>:<port> of a vla-eval model server, got {self.url!r}")
        if min(self.connect_timeout_s, self.timeout_s) <= 0:
            raise UserError("policy.connect_timeout_s and policy.timeout_s must be positive")
        if self.image_format not in IMAGE_FORMATS:
            raise UserError(f"policy.image_format must be one of {', '.join(IMAGE_FORMATS)}, got {self.image_format!r}")

    def session(self) -> Session:
        return Session(self.url, self.timeout_s, self.connect_timeout_s, self.image_format)

    @cached_property
    def server(self) -> dict[str, Any]:
        """The server's HELLO payload (asked once)."""
        session = self.session()
        session.close()
        return session.info

    def convention(self, env: EnvConfig) -> Convention:
        params = self.server.get("observation_params") or {}
        if not isinstance(params, dict):
            raise UserError(f"the vla-eval model server at {self.url} sent malformed observation_params")
        convention = convention_for(env, params)
        check_specs(self.server, self.url, convention.env_name, convention.observation_spec, convention.action_spec)
        return convention

    def reads(self, env: EnvConfig) -> set[str] | None:
        return self.convention(env).reads

    def resets_rows(self) -> bool:
        return True

    def identity(self) -> dict[str, Any]:
        """The server tells its class and vla-eval version, not its weights: recorded with its url."""
        info = self.server
        return {"vla_eval_server": {k: info.get(k) for k in ("model_server", "harness_version")}, "url": self.url}

    def build(self, env: EnvConfig, device: str) -> VlaEvalPolicy:
        if env.processors.get("pre"):
            raise UserError(
                "policy=vla_eval builds the server's observations from the raw ones: env.processors.pre must be "
                "empty (policy=vla_eval sets it so; do not override env.processors)"
            )
        return VlaEvalPolicy(self, self.convention(env))


@dataclass
class Row:
    session: Session | None = None
    running: bool = False


class VlaEvalPolicy(RowResettablePolicy):
    def __init__(self, config: VlaEvalPolicyConfig, convention: Convention) -> None:
        self.config, self.convention = config, convention
        self.rows: list[Row] = []
        self.forks: list[VlaEvalPolicy] = []

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        while len(self.rows) < len(episode_seeds):
            self.rows.append(Row())
        self.reset_slots(task, dict(enumerate(episode_seeds)))

    def reset_slots(self, task: TaskSpec, seeds: dict[int, int | None]) -> None:
        for i, seed in seeds.items():
            row = self.rows[i]
            self._end(row)
            if seed is None:
                continue
            if row.session is None:
                row.session = self.config.session()
            # As vla-eval's runner: the task's scalar fields (its name is the language instruction).
            row.session.send(
                "episode_start", {"task": {"name": task.description, "suite": task.task_group, "task_id": task.task_id}}
            )
            row.running = True

    def _end(self, row: Row) -> None:
        if row.running and row.session is not None:
            row.session.send("episode_end", {})
        row.running = False

    def select_action(self, batch: dict[str, Any]) -> np.ndarray:
        raw, texts = batch[RAW_KEY], batch["task"]
        sent = {}
        for i, row in enumerate(self.rows):
            if row.running and row.session is not None:
                observation = self.convention.observation(raw, i, str(texts[i]))
                sent[i] = row.session.send("observation", observation)
        actions = np.zeros((len(self.rows), self.convention.action_dim), dtype=np.float32)
        failed: dict[int, str] = {}
        for i, seq in sent.items():  # every reply is read, so that each session stays in step
            session = self.rows[i].session
            assert session is not None
            try:
                actions[i] = self.convention.action(self._checked(session.act(seq), session.url))
            except ServerError as err:
                failed[i] = str(err)
        if failed:
            i = min(failed)
            message = f"the vla-eval model server at {self.config.url} answered ERROR: {failed[i]}"
            raise SubEnvFailed(i, "step", message, "")
        return actions

    def _checked(self, payload: dict[str, Any], url: str) -> np.ndarray:
        action = payload.get("actions", payload.get("action"))
        dim = self.convention.action_dim
        if not isinstance(action, np.ndarray) or action.dtype.kind not in "biuf":
            raise UserError(f"the vla-eval model server at {url} sent an action that is not a numeric array")
        if action.shape not in ((dim,), (1, dim)):
            raise UserError(
                f"the vla-eval model server at {url} sent an action of shape {action.shape}; "
                f"{self.convention.env_name} applies one action of {dim} per observation (a server sending whole "
                "chunks needs its chunk_size set, so that it buffers them)"
            )
        if not np.isfinite(action).all():
            raise UserError(f"the vla-eval model server at {url} sent a non-finite action (nan or inf)")
        return action.reshape(dim)

    def fork(self) -> VlaEvalPolicy:
        forked = VlaEvalPolicy(self.config, self.convention)
        self.forks.append(forked)
        return forked

    def finish(self) -> None:
        self.close()

    def close(self) -> None:
        for policy in [self, *self.forks]:
            for row in policy.rows:
                if row.session is not None:
                    try:
                        policy._end(row)
                    except UserError:
                        pass  # a server already gone: nothing to tell it
                    row.session.close()
                    row.session = None
