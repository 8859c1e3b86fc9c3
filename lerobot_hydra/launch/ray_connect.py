"""Joining the Ray cluster a sweep runs on: `hydra.launcher.ray.init`, the settings of `ray.init` (the official
hydra-ray-launcher's), checked first so that an address where no cluster answers is one line instead of Ray's
minutes of connection retries.

Both the launcher (ray_cluster.py) and the sweep's policy server (serving/ray_server.py) join through `connect`,
whichever comes first; the second finds Ray connected.
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lerobot_hydra.core.errors import UserError

# Addresses that are not host:port: Ray finds the cluster itself (RAY_ADDRESS, or one started on this machine).
FOUND_BY_RAY = {None, "", "auto", "local"}
PROBE_TIMEOUT_S = 10.0
SETTING = "hydra.launcher.ray.init.address"


def connect(init: DictConfig | dict[str, Any] | None) -> None:
    """`ray.init` with the sweep's settings, unless this process is connected already. Raises UserError when no
    Ray cluster answers at the address."""
    import ray

    if ray.is_initialized():
        return
    raw = OmegaConf.to_container(init, resolve=True) if isinstance(init, DictConfig) else init
    settings: dict[str, Any] = dict(raw or {})  # type: ignore[arg-type]
    settings.setdefault("logging_level", logging.WARNING)
    address = settings.get("address")
    _probe(address)
    try:
        ray.init(**settings)
    except ConnectionError as err:
        raise UserError(no_cluster(address, _first_line(err))) from err


def _probe(address: str | None) -> None:
    """A TCP connection to the address's host and port (Ray's GCS, or its client server for ray://)."""
    if address in FOUND_BY_RAY:
        return
    host, _, port = str(address).removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=PROBE_TIMEOUT_S):
            return
    except ValueError as err:
        raise UserError(
            f"{SETTING}={address} is not an address of a Ray cluster; give host:port (its head's GCS port, 6379 by "
            "default), ray://host:port, or auto"
        ) from err
    except OSError as err:
        raise UserError(no_cluster(address, err.strerror or type(err).__name__)) from err


def no_cluster(address: str | None, why: str) -> str:
    return (
        f"no Ray cluster at {SETTING}={address} ({why}); start one (ray start --head) or give the address of a "
        "running one (its head prints it; auto: the cluster this machine belongs to)"
    )


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def ray_launcher_missing() -> str:
    """The line for hydra/launcher=ray (or a ray_* preset) where the official Ray launcher is not installed."""
    if sys.version_info >= (3, 12):  # its cloudpickle<3 pin predates Python 3.12 (see pyproject.toml)
        return (
            'hydra/launcher=ray needs the Ray launcher; install it with pip install -e ".[ray]" and, on Python 3.12, '
            "pip install --no-deps hydra-ray-launcher==1.2.2"
        )
    return 'hydra/launcher=ray needs the Ray launcher; install it with pip install -e ".[ray]"'
