"""A client's connection to a policy server: finding it (a url, or an announce file a server writes once it
listens, which also gives its API key and the certificate to trust), connecting within a time limit, and turning a
lost, refusing or misbehaving server into one line naming its url."""

from __future__ import annotations

import json
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.serving.keys import ENV_VAR, authorization, client_tls, given_key
from lerobot_hydra.serving.wire import ProtocolError, packb, unpackb

POLL_S = 0.2
MAX_REPLY_BYTES = 64 * 2**20  # action chunks and metadata are small: a larger reply is a broken server's


def is_url(target: str) -> bool:
    return target.startswith(("ws://", "wss://"))


def announced(path: Path) -> dict[str, Any] | None:
    """A server's announce file, or None while there is none (a file is written whole or not at all)."""
    try:
        info = json.loads(path.read_text())
        str(info["url"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"policy.url={path} is not a policy server's announce file ({err}); check the path") from err
    return info


@dataclass
class Access:
    """How a client proves itself and checks the server: its API key file (else $LEROBOT_HYDRA_API_KEY, else the
    announce file's key) and a certificate to trust for wss:// (else the announce file's, else the system's)."""

    key_file: str | None = None
    trusted_cert: str | None = None


class Connection:
    """One websocket to the server, opened at construction: `metadata` is what the server sent on connect."""

    def __init__(self, target: str, timeout_s: float, access: Access | None = None) -> None:
        self.target, self.access = target, access or Access()
        self.url, self.socket, self.metadata = self._connect(target, timeout_s)

    def _connect(self, target: str, timeout_s: float) -> tuple[str, Any, dict[str, Any]]:
        """Retries until a server answers: an announce file is read again at every try (a restarted server
        rewrites it), and a refused connection is a server still starting."""
        deadline = time.monotonic() + timeout_s
        url: str | None = target if is_url(target) else None
        reason = "no announce file yet"
        while True:
            info = None if is_url(target) else announced(Path(target).expanduser())
            url = str(info["url"]) if info is not None else url
            if url is not None:
                try:
                    return self._open(url, info or {}, timeout_s)
                except (OSError, TimeoutError) as err:
                    reason = f"{type(err).__name__}: {err}"
            if time.monotonic() >= deadline:
                where = url or f"the announce file {target}"
                raise UserError(
                    f"no policy server answered at {where} within policy.connect_timeout_s={timeout_s:g} ({reason}); "
                    "start one with lerobot-hydra-serve, or raise policy.connect_timeout_s"
                )
            time.sleep(POLL_S)

    def _open(self, url: str, info: dict[str, Any], timeout_s: float) -> tuple[str, Any, dict[str, Any]]:
        from websockets.exceptions import InvalidStatus
        from websockets.sync.client import connect

        key = given_key(self.access.key_file, "policy.api_key_file") or info.get("api_key")
        trusted = self.access.trusted_cert or info.get("tls_cert")
        try:
            # Entered as a context manager (what websockets >= 17.1 wants), left in close().
            socket = connect(
                url,
                compression=None,
                max_size=MAX_REPLY_BYTES,
                open_timeout=max(1.0, timeout_s),
                additional_headers=authorization(key),
                ssl=client_tls(url, trusted),
            ).__enter__()
        except InvalidStatus as err:
            raise UserError(f"the policy server at {url} refused this client: {_refusal(err)}") from None
        except ssl.SSLError as err:
            raise UserError(
                f"TLS with the policy server at {url} failed ({err.reason or err}); give the certificate to trust "
                "in policy.tls_cert (or name the server by its announce file)"
            ) from None
        except (OSError, TimeoutError):
            raise
        except Exception as err:  # the handshake failed: not a websocket server at all
            raise UserError(f"policy.url={self.target}: {url} is not a policy server ({err})") from err
        self.url = url
        metadata = self._receive(socket, "its metadata")
        if not isinstance(metadata, dict):
            raise UserError(f"the server at {url} sent no metadata map on connect; is it a policy server?")
        return url, socket, metadata

    def _receive(self, socket: Any, what: str) -> Any:
        from websockets.exceptions import ConnectionClosed

        try:
            reply = socket.recv()
        except (ConnectionClosed, OSError, TimeoutError) as err:
            raise self.lost(err) from None
        if isinstance(reply, str):  # openpi's servers send an error as text (a traceback), then close
            lines = [line for line in reply.strip().splitlines() if line.strip()]
            raise UserError(f"the policy server at {self.url} failed: {lines[-1] if lines else 'no reason given'}")
        try:
            return unpackb(reply)
        except ProtocolError as err:
            raise UserError(f"the policy server at {self.url} sent {what} that is not the protocol's: {err}") from None

    def lost(self, err: BaseException) -> UserError:
        return UserError(
            f"the policy server at {self.url} went away ({type(err).__name__}: {err}); the recorded episodes are "
            "kept: rerun the same command once a server runs again and the run resumes"
        )

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        try:
            self.socket.send(packb(message))
        except (ConnectionClosed, OSError, TimeoutError) as err:
            raise self.lost(err) from None
        result = self._receive(self.socket, "a reply")
        if not isinstance(result, dict):
            raise UserError(f"the policy server at {self.url} replied with a {type(result).__name__}, not a map")
        return result

    def close(self) -> None:
        self.socket.close()


def _refusal(err: Any) -> str:
    status = getattr(getattr(err, "response", None), "status_code", None)
    if status == 401:
        return (
            "HTTP 401, no API key or a wrong one; give the server's key in policy.api_key_file or $" + ENV_VAR + ", "
            "or name the server by its announce file (policy.url=<server.json>), which holds it"
        )
    if status == 503:
        return "HTTP 503, it serves serve.max_connections clients already; retry later, or raise that setting"
    return f"HTTP {status}"
