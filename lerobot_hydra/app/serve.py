"""`lerobot-hydra-serve`: one policy, built as eval.py builds it, served to every evaluation shard that connects
with `policy=remote` (docs/serving.md)."""

from __future__ import annotations

import json
import logging
import os
import secrets
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import hydra
from omegaconf import DictConfig, OmegaConf

from lerobot_hydra.core.durable import replace_durably
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.gl import resolve_device
from lerobot_hydra.serving.keys import ENV_VAR, public_host, server_key
from lerobot_hydra.serving.schema import ServeConfig, validate_serve

log = logging.getLogger("lerobot_hydra")

CONFIG_PATH = "pkg://lerobot_hydra.conf"


def build_chunk_policy(cfg: DictConfig) -> Any:
    """The policy of `cfg`, loaded as eval.py loads it (the same run builder), behind the server's chunk interface."""
    from importlib.metadata import PackageNotFoundError, version

    from lerobot_hydra.policies.lerobot.features import env_observation_features
    from lerobot_hydra.rollout.build import build_run
    from lerobot_hydra.serving.chunks import ChunkPolicy

    parts = build_run(cfg)
    policy = OmegaConf.to_container(cfg.policy, resolve=True)
    assert isinstance(policy, dict)
    packages = {}
    for name in ["torch", *parts.policy.distributions()]:
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    # What a shard's fingerprint records of the served policy (the device is outcome-neutral, as in eval.py).
    identity = {
        "policy": {k: v for k, v in policy.items() if k != "device"},
        "checkpoint": parts.policy.identity(),
        "packages": packages,
    }
    name = str(policy.get("path") or policy["_target_"])
    served = ChunkPolicy(parts.build_policy(), identity, name, env_observation_features(parts.run_env))
    log.info("serving %s on %s", name, parts.policy.resolved_device(resolve_device(str(cfg.device))))
    return served


def announce(path: Path, url: str, key: str, trusted_cert: str | None) -> None:
    """Writes the announce file (whole or not at all, mode 0600 from its creation: it holds the API key): where
    the shards find this server, the key they present, and the certificate they trust for a wss:// url."""
    where = urlsplit(url)
    info = {"url": url, "pid": os.getpid(), "host": where.hostname, "port": where.port, "api_key": key}
    if trusted_cert:
        info["tls_cert"] = str(Path(trusted_cert).expanduser().resolve())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(info, file)
        replace_durably(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def serve(cfg: DictConfig, settings: ServeConfig | None = None, server_ready: Any = None) -> None:
    """Builds the policy and serves it until stopped (or every shard is done). `server_ready(server)` runs once
    it listens (tests stop it from there)."""
    from lerobot_hydra.serving.server import PolicyServer

    settings = settings or validate_serve(cfg)
    key, given = server_key(settings.api_key_file)
    announce_path = Path(settings.announce).expanduser() if settings.announce else None
    if settings.shards and announce_path is None and not given:
        raise UserError(
            f"serve.shards={settings.shards} counts the clients that present the API key, which none could learn: "
            "give serve.announce (its clients read the key there), or a key (serve.api_key_file or $" + ENV_VAR + ")"
        )
    logging.getLogger("websockets").setLevel(logging.WARNING)  # a line per connection otherwise
    policy = build_chunk_policy(cfg)
    server = PolicyServer(policy, settings, key, given)

    def listening(port: int) -> None:
        server.port = port
        url = f"{server.scheme}://{public_host(settings.host)}:{port}"
        if announce_path is not None:
            announce(announce_path, url, key, settings.tls_cert)
        where = f"; announced in {announce_path}" if announce_path else ""
        needed = "required" if server.gate.key_required else "optional on loopback"
        log.info(
            "policy server listening on %s (API key %s, max_batch_size=%d, max_wait_ms=%g)%s",
            url,
            needed,
            settings.max_batch_size,
            settings.max_wait_ms,
            where,
        )
        if server_ready is not None:
            server_ready(server)

    try:
        server.run(listening)
    finally:
        if announce_path is not None and _announced_by_me(announce_path):
            announce_path.unlink(missing_ok=True)  # a stale file would send shards to a closed port


def _announced_by_me(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("pid") == os.getpid()
    except (OSError, ValueError):
        return False


@hydra.main(config_path=CONFIG_PATH, config_name="serve", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    try:
        serve(cfg)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def main() -> None:
    from lerobot_hydra.app.cli import one_line_errors

    with one_line_errors():
        _hydra_main()


if __name__ == "__main__":
    main()
