"""The schema of `lerobot-hydra-serve` (conf/serve.yaml): the env and policy nodes of eval.py, plus `serve`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig

from lerobot_hydra.core.errors import UserError


@dataclass
class ServeConfig:
    # 0.0.0.0: every interface, so that shards on other nodes reach it (clients must then present the API key);
    # 127.0.0.1: shards on this machine only (docs/security.md).
    host: str = "0.0.0.0"
    # 0: a free port, chosen by the OS (the announce file names it).
    port: int = 0
    # Rows of one forward pass at most.
    max_batch_size: int = 32
    # How long a waiting request may wait for others to fill its batch.
    max_wait_ms: float = 5.0
    # Once listening, the server writes {"url", "pid", "host", "port", "api_key"} there (atomically, mode 0600: the
    # clients that read it, a sweep's shards among them, present the key); null: nowhere.
    announce: str | None = None
    # 0: serve until killed; N: exit once N distinct clients have each reported their run complete.
    shards: int = 0
    # Seconds between the log lines of batch sizes and latencies.
    log_interval_s: float = 5.0
    # A file holding the API key (else $LEROBOT_HYDRA_API_KEY, else a random key). A given key is always required;
    # a random one when the server listens beyond loopback. Only a client with the key counts toward `shards`.
    api_key_file: str | None = None
    # TLS (wss://) for networks that are not trusted: the certificate chain and its private key (PEM files).
    tls_cert: str | None = None
    tls_key: str | None = None
    # The largest message accepted, in MiB; null: derived from the policy's observation features (max_batch_size
    # rows of its history at 8 bytes an element, plus 1 MiB).
    max_message_mb: float | None = None
    # Connections served at once; more are refused at the handshake (HTTP 503).
    max_connections: int = 256
    # Messages of one connection read ahead of the one being answered (more wait in the network: backpressure).
    max_in_flight: int = 4


@dataclass
class ServeRunConfig:
    env: Any = MISSING
    policy: Any = MISSING
    # Not the server's: the shards' eval.* settings. Only a policy YAML's own eval.* keys land here (ignored);
    # an eval.* override on the server's command line is refused by Hydra.
    eval: Any = None
    serve: ServeConfig = field(default_factory=ServeConfig)
    device: str = "auto"


ConfigStore.instance().store(name="serve_schema", node=ServeRunConfig)


def validate_serve(cfg: DictConfig) -> ServeConfig:
    """Every serve setting in range, the env and policy nodes as eval.py checks them."""
    from omegaconf import OmegaConf

    serve: ServeConfig = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ServeConfig), cfg.serve))
    if not 0 <= serve.port <= 65535:
        raise UserError(f"serve.port must be 0 (a free port) to 65535, got {serve.port}")
    if serve.max_batch_size < 1:
        raise UserError(f"serve.max_batch_size must be at least 1, got {serve.max_batch_size}")
    if serve.max_wait_ms < 0:
        raise UserError(f"serve.max_wait_ms must be 0 or more, got {serve.max_wait_ms}")
    if serve.shards < 0:
        raise UserError(f"serve.shards must be 0 (serve until killed) or more, got {serve.shards}")
    if serve.log_interval_s <= 0:
        raise UserError(f"serve.log_interval_s must be positive, got {serve.log_interval_s}")
    for name in ("max_connections", "max_in_flight"):
        if getattr(serve, name) < 1:
            raise UserError(f"serve.{name} must be at least 1, got {getattr(serve, name)}")
    if serve.max_message_mb is not None and serve.max_message_mb <= 0:
        raise UserError(f"serve.max_message_mb must be positive (or null: derived), got {serve.max_message_mb}")
    from lerobot_hydra.schemas.schema import validate_policy_and_env

    policy_cls = validate_policy_and_env(cfg)
    if getattr(policy_cls, "__name__", "") == "RemotePolicyConfig":
        raise UserError("policy=remote cannot be served (it is the client); choose the policy to serve")
    return serve
