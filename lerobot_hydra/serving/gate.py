"""The server's door, answered on the HTTP request of the websocket handshake, before any message is read:
`GET /healthz` (counts only, nothing secret), too many connections (503), a missing or wrong API key (401). Each
refusal is one log line naming the peer. A connection that presented the right key is remembered as
authenticated: only such a client's `done` counts toward `serve.shards`."""

from __future__ import annotations

import http
import json
import logging
import weakref
from collections.abc import Callable
from typing import Any

from lerobot_hydra.serving.keys import HEADER, presented

log = logging.getLogger("lerobot_hydra")


def peer(connection: Any) -> str:
    address = getattr(connection, "remote_address", None)
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else "an unknown peer"


class Gate:
    def __init__(
        self, key: str, key_required: bool, max_connections: int, open_count: Callable[[], int], health: Callable
    ) -> None:
        self.key, self.key_required, self.max_connections = key, key_required, max_connections
        self.open_count, self.health = open_count, health
        self.authenticated: weakref.WeakSet[Any] = weakref.WeakSet()
        self.refused = 0

    def __call__(self, connection: Any, request: Any) -> Any:
        if request.path == "/healthz":
            return self._json(connection, self.health())
        key = presented(request.headers.get(HEADER), self.key)
        if key is False or (key is None and self.key_required):
            why = "a wrong API key" if key is False else "no API key"
            return self._refuse(connection, http.HTTPStatus.UNAUTHORIZED, f"{why} (Authorization: Api-Key <key>)")
        if self.open_count() >= self.max_connections:
            return self._refuse(
                connection, http.HTTPStatus.SERVICE_UNAVAILABLE, f"serve.max_connections={self.max_connections} open"
            )
        if key:
            self.authenticated.add(connection)
        return None

    def _refuse(self, connection: Any, status: http.HTTPStatus, why: str) -> Any:
        self.refused += 1
        log.warning("refused the connection of %s: %s", peer(connection), why)
        return connection.respond(status, f"{status.phrase}: {why}\n")

    @staticmethod
    def _json(connection: Any, body: dict[str, Any]) -> Any:
        response = connection.respond(http.HTTPStatus.OK, json.dumps(body) + "\n")
        del response.headers["Content-Type"]
        response.headers["Content-Type"] = "application/json"
        return response
