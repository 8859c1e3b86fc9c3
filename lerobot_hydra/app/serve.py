"""`lerobot-hydra-serve`: one policy, built as eval.py builds it, served to every evaluation shard that connects
with `policy=remote` (docs/serving.md)."""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from lerobot_hydra.core.durable import write_json_atomic
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.gl import resolve_device
from lerobot_hydra.serving.schema import ServeConfig, validate_serve

log = logging.getLogger("lerobot_hydra")

CONFIG_PATH = "pkg://lerobot_hydra.conf"
WILDCARD_HOSTS = {"0.0.0.0", "::", ""}


def build_chunk_policy(cfg: DictConfig) -> Any:
    """The policy of `cfg`, loaded as eval.py loads it (the same run builder), behind the server's chunk interface."""
    from importlib.metadata import PackageNotFoundError, version

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
    served = ChunkPolicy(parts.build_policy(), identity, name)
    log.info("serving %s on %s", name, parts.policy.resolved_device(resolve_device(str(cfg.device))))
    return served


def announce(path: Path, host: str, port: int) -> dict[str, Any]:
    """Writes the announce file (whole or not at all): where the shards find this server."""
    public = socket.gethostname() if host in WILDCARD_HOSTS else host
    info = {"url": f"ws://{public}:{port}", "pid": os.getpid(), "host": public, "port": port}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, info)
    return info


def serve(cfg: DictConfig, settings: ServeConfig | None = None, server_ready: Any = None) -> None:
    """Builds the policy and serves it until stopped (or every shard is done). `server_ready(server)` runs once
    it listens (tests stop it from there)."""
    from lerobot_hydra.serving.server import PolicyServer

    settings = settings or validate_serve(cfg)
    logging.getLogger("websockets").setLevel(logging.WARNING)  # a line per connection otherwise
    policy = build_chunk_policy(cfg)
    server = PolicyServer(policy, settings)
    announce_path = Path(settings.announce).expanduser() if settings.announce else None

    def listening(port: int) -> None:
        server.port = port
        url = f"ws://{settings.host}:{port}"
        if announce_path is not None:
            url = announce(announce_path, settings.host, port)["url"]
        where = f"; announced in {announce_path}" if announce_path else ""
        log.info(
            "policy server listening on %s (max_batch_size=%d, max_wait_ms=%g)%s",
            url,
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
    import json

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
