"""API keys of policy serving, as openpi's client sends them: the HTTP header `Authorization: Api-Key <key>` on the
websocket handshake.

A key comes from the environment variable `LEROBOT_HYDRA_API_KEY`, or from a file a setting names (never from the
command line, which every user of the machine sees in `ps`); a server given none makes a random one. The server
writes its key into its announce file (mode 0600: only its user reads it), where the clients that find the server
through that file, a sweep's shard jobs among them, read it. TLS settings are here too: a server's certificate and
key, and the certificate a client trusts for it.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
import ssl
from pathlib import Path

from lerobot_hydra.core.errors import UserError

ENV_VAR = "LEROBOT_HYDRA_API_KEY"
HEADER = "Authorization"
SCHEME = "Api-Key"
LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    """Whether only processes of this machine can reach `host` (a wildcard address or a name reaches others)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_key_file(path: str, setting: str) -> str:
    try:
        key = Path(path).expanduser().read_text().strip()
    except OSError as err:
        raise UserError(f"{setting}={path} cannot be read ({err.strerror}); give a file holding the API key") from None
    if not key or any(c.isspace() for c in key):
        raise UserError(f"{setting}={path} holds no API key (one line, no spaces); write the key into it")
    return key


def given_key(key_file: str | None, setting: str) -> str | None:
    """The key a user gave: the file of `setting`, else the environment variable, else None."""
    if key_file:
        return read_key_file(key_file, setting)
    key = os.environ.get(ENV_VAR, "").strip()
    return key or None


def server_key(key_file: str | None) -> tuple[str, bool]:
    """(the server's key, whether it was given): a given one, else a random one."""
    key = given_key(key_file, "serve.api_key_file")
    return (key, True) if key is not None else (secrets.token_urlsafe(32), False)


def authorization(key: str | None) -> dict[str, str]:
    """The handshake headers that present `key`, as openpi's client sends them."""
    return {HEADER: f"{SCHEME} {key}"} if key else {}


def presented(header: str | None, key: str) -> bool | None:
    """None: no key presented; else whether the header's key is `key` (in constant time)."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return scheme == SCHEME and hmac.compare_digest(value.strip().encode(), key.encode())


def server_tls(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The server's TLS context (wss://) from a certificate chain and its private key, or None without both."""
    if not cert and not key:
        return None
    if not cert or not key:
        raise UserError("TLS needs both serve.tls_cert and serve.tls_key (PEM files); give both, or neither")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(Path(cert).expanduser(), Path(key).expanduser())
    except (OSError, ssl.SSLError) as err:
        raise UserError(f"serve.tls_cert={cert} / serve.tls_key={key} cannot be loaded ({err}); check them") from None
    return context


def client_tls(url: str, trusted_cert: str | None) -> ssl.SSLContext | None:
    """The client's TLS context for a wss:// url: the system's trusted CAs, plus `trusted_cert` if given."""
    if not url.startswith("wss://"):
        return None
    context = ssl.create_default_context()
    if trusted_cert:
        try:
            context.load_verify_locations(Path(trusted_cert).expanduser())
        except (OSError, ssl.SSLError) as err:
            raise UserError(f"the server certificate {trusted_cert} cannot be loaded ({err})") from None
    return context


def public_host(host: str) -> str:
    """The name clients use for a server listening on `host` (this machine's name for a wildcard address)."""
    return socket.gethostname() if host in {"0.0.0.0", "::", ""} else host
