"""A client's connection to a policy server: finding it (a url, or an announce file a server writes once it
listens), connecting within a time limit, and turning a lost server into one line."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.serving.wire import packb, unpackb

POLL_S = 0.2


def is_url(target: str) -> bool:
    return target.startswith(("ws://", "wss://"))


def announced_url(path: Path) -> str | None:
    """The url in a server's announce file, or None while there is none (a file is written whole or not at all)."""
    try:
        return str(json.loads(path.read_text())["url"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"policy.url={path} is not a policy server's announce file ({err}); check the path") from err


class Connection:
    """One websocket to the server, opened at construction: `metadata` is what the server sent on connect."""

    def __init__(self, target: str, timeout_s: float) -> None:
        self.target = target
        self.url, self.socket, self.metadata = self._connect(target, timeout_s)

    @staticmethod
    def _connect(target: str, timeout_s: float) -> tuple[str, Any, dict[str, Any]]:
        """Retries until a server answers: an announce file is read again at every try (a restarted server
        rewrites it), and a refused connection is a server still starting."""
        from websockets.sync.client import connect

        deadline = time.monotonic() + timeout_s
        url: str | None = target if is_url(target) else None
        reason = "no announce file yet"
        while True:
            if not is_url(target):
                url = announced_url(Path(target).expanduser())
            if url is not None:
                try:
                    # Entered as a context manager (what websockets >= 17.1 wants), left in close().
                    socket = connect(url, compression=None, max_size=None, open_timeout=max(1.0, timeout_s))
                    socket = socket.__enter__()
                    metadata = unpackb(socket.recv())
                    if not isinstance(metadata, dict):
                        raise UserError(f"the server at {url} sent no metadata map on connect; is it a policy server?")
                    return url, socket, metadata
                except (OSError, TimeoutError) as err:
                    reason = f"{type(err).__name__}: {err}"
                except Exception as err:  # the handshake failed: not a websocket server at all
                    if isinstance(err, UserError):
                        raise
                    raise UserError(f"policy.url={target}: {url} is not a policy server ({err})") from err
            if time.monotonic() >= deadline:
                where = url or f"the announce file {target}"
                raise UserError(
                    f"no policy server answered at {where} within policy.connect_timeout_s={timeout_s:g} ({reason}); "
                    "start one with lerobot-hydra-serve, or raise policy.connect_timeout_s"
                )
            time.sleep(POLL_S)

    def lost(self, err: BaseException) -> UserError:
        return UserError(
            f"the policy server at {self.url} went away ({type(err).__name__}: {err}); the recorded episodes are "
            "kept: rerun the same command once a server runs again and the run resumes"
        )

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        try:
            self.socket.send(packb(message))
            reply = self.socket.recv()
        except (ConnectionClosed, OSError, TimeoutError) as err:
            raise self.lost(err) from None
        if isinstance(reply, str):  # openpi's servers send an error as text (a traceback), then close
            lines = [line for line in reply.strip().splitlines() if line.strip()]
            raise UserError(f"the policy server at {self.url} failed: {lines[-1] if lines else 'no reason given'}")
        result = unpackb(reply)
        if not isinstance(result, dict):
            raise UserError(f"the policy server at {self.url} replied with a {type(result).__name__}, not a map")
        return result

    def close(self) -> None:
        self.socket.close()
