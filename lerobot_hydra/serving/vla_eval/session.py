"""One session with a vla-eval model server: a websocket of its own, opened with the HELLO handshake.

vla-eval's server keeps one session per connection (its action-chunk buffer and per-episode state are the
connection's), and a session runs one episode at a time, so each batch row of a run has its own session. Every wait
for the server is bounded (`timeout_s`); a server that is not there, speaks another protocol version or breaks the
protocol is one line naming its url. An ERROR message answering an observation is the row's `ServerError`.
"""

from __future__ import annotations

import time
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.serving.vla_eval.wire import PROTOCOL_VERSION, pack, unpack
from lerobot_hydra.serving.wire import ProtocolError

POLL_S = 0.2
MAX_MESSAGE_BYTES = 64 * 2**20  # a server's messages are actions and its HELLO: a larger one is a broken server's
CLIENT_NAME = "lerobot_hydra"


class ServerError(Exception):
    """The server answered an observation or an episode start with ERROR (its message)."""


class Session:
    """A connection to the server at `url` after the HELLO exchange; `info` is the server's HELLO payload."""

    def __init__(self, url: str, timeout_s: float, connect_timeout_s: float, image_format: str) -> None:
        self.url, self.timeout_s, self.image_format = url, timeout_s, image_format
        self.seq = 0
        self.socket = _connect(url, connect_timeout_s)
        try:
            self.send("hello", {"harness_version": CLIENT_NAME, "protocol_version": PROTOCOL_VERSION})
            kind, self.info, _ = self.receive("its HELLO")
        except BaseException:
            self.close()
            raise
        if kind != "hello":
            self.close()
            raise UserError(f"the vla-eval model server at {url} answered HELLO with {kind.upper()}; is it one?")
        version = self.info.get("protocol_version")
        if version != PROTOCOL_VERSION:
            self.close()
            raise UserError(
                f"the vla-eval model server at {url} speaks protocol version {version!r}, this client version "
                f"{PROTOCOL_VERSION} (vla-eval 0.8); serve the model with a vla-eval release of protocol "
                f"{PROTOCOL_VERSION}"
            )

    def send(self, kind: str, payload: dict[str, Any]) -> int:
        from websockets.exceptions import ConnectionClosed

        self.seq += 1
        try:
            self.socket.send(pack(kind, payload, self.seq, self.image_format))
        except (ConnectionClosed, OSError) as err:
            raise self.lost(err) from None
        return self.seq

    def receive(self, what: str) -> tuple[str, dict[str, Any], int]:
        from websockets.exceptions import ConnectionClosed

        try:
            data = self.socket.recv(timeout=self.timeout_s)
        except TimeoutError:
            raise UserError(
                f"the vla-eval model server at {self.url} sent no {what} within policy.timeout_s={self.timeout_s:g} "
                "s (a hung or overloaded server); check its log, or raise policy.timeout_s"
            ) from None
        except (ConnectionClosed, OSError) as err:
            raise self.lost(err) from None
        try:
            return unpack(data)
        except ProtocolError as err:
            raise UserError(
                f"the vla-eval model server at {self.url} sent {what} that is not the protocol's: {err}"
            ) from None

    def act(self, seq: int) -> dict[str, Any]:
        """The ACTION answering the observation sent as `seq`; `ServerError` for an ERROR (of that observation,
        or of the episode's start, which the server reports when it fails)."""
        while True:
            kind, payload, got = self.receive("action")
            if kind == "error":
                raise ServerError(str(payload.get("error", payload)))
            if kind == "action" and got == seq:
                return payload
            if kind not in ("action", "hello"):
                raise UserError(f"the vla-eval model server at {self.url} sent {kind.upper()} instead of an action")

    def lost(self, err: BaseException) -> UserError:
        return UserError(
            f"the vla-eval model server at {self.url} went away ({type(err).__name__}: {err}); the recorded episodes "
            "are kept: rerun the same command once it runs again and the run resumes"
        )

    def close(self) -> None:
        self.socket.close()


def _connect(url: str, timeout_s: float) -> Any:
    """A websocket to `url`, retried until `timeout_s` while the server is not listening yet."""
    from websockets.exceptions import InvalidHandshake, InvalidURI
    from websockets.sync.client import connect

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return connect(
                url, compression=None, max_size=MAX_MESSAGE_BYTES, open_timeout=max(1.0, timeout_s), ping_interval=None
            ).__enter__()
        except InvalidURI as err:
            raise UserError(f"policy.url={url} is not a websocket url ({err}); give ws://<host>:<port>") from None
        except InvalidHandshake as err:
            raise UserError(f"policy.url={url} is not a vla-eval model server ({err})") from None
        except (OSError, TimeoutError) as err:
            if time.monotonic() >= deadline:
                raise UserError(
                    f"no vla-eval model server answered at {url} within policy.connect_timeout_s={timeout_s:g} "
                    f"({type(err).__name__}: {err}); start one (python -m vla_eval.model_servers.<name> --address "
                    "host:port ...), or raise policy.connect_timeout_s"
                ) from None
        time.sleep(POLL_S)
