"""The schema of `lerobot-hydra-serve` (conf/serve.yaml): the env and policy nodes of eval.py, plus `serve`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig

from lerobot_hydra.core.errors import UserError


@dataclass
class ServeConfig:
    # 0.0.0.0: every interface, so that shards on other nodes reach it (there is no authentication: serve on
    # a trusted cluster network, or 127.0.0.1 for shards on this machine only).
    host: str = "0.0.0.0"
    # 0: a free port, chosen by the OS (the announce file names it).
    port: int = 0
    # Rows of one forward pass at most.
    max_batch_size: int = 32
    # How long a waiting request may wait for others to fill its batch.
    max_wait_ms: float = 5.0
    # Once listening, the server writes {"url", "pid", "host", "port"} there (atomically); null: nowhere.
    announce: str | None = None
    # 0: serve until killed; N: exit once N distinct clients have each reported their run complete.
    shards: int = 0
    # Seconds between the log lines of batch sizes and latencies.
    log_interval_s: float = 5.0


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
    from lerobot_hydra.config.schema import validate_policy_and_env

    policy_cls = validate_policy_and_env(cfg)
    if getattr(policy_cls, "__name__", "") == "RemotePolicyConfig":
        raise UserError("policy=remote cannot be served (it is the client); choose the policy to serve")
    return serve
