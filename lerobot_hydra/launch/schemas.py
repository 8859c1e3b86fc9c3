"""Our launchers' schemas in Hydra's ConfigStore, under the option names users type.

`hydra/launcher=basic` (Hydra's default), `submitit_local`/`submitit_slurm` (the hydra-submitit-launcher
plugin's) and `ray` (the hydra-ray-launcher plugin's) name ConfigStore entries; `register` stores ours under those
names: the same settings (the plugins' dataclasses), with `_target_` our launcher classes
(hydra_plugins/lerobot_hydra_launchers/launchers.py; Hydra instantiates launchers from the `hydra_plugins` package
only). The presets under conf/hydra/launcher/ (local_shards, slurm_cpu, slurm_gpu, ray_cpu, ray_gpu) extend them.
app/probing.py `register` calls `register`.

Why the ConfigStore and not YAML files of the same names in our tree: Hydra merges a file with the ConfigStore entry
of the same name ("automatic schema matching", deprecated, a warning every run), so the entries themselves are
replaced. Hydra stores its own entries when it first discovers its plugins (it executes each plugin's module then,
even one imported before), so `register` has the discovery done first; tests/sweeps/test_launchers.py pins that
every name resolves to our launchers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

GROUP = "hydra/launcher"
PROVIDER = "lerobot_hydra"
# The option names of hydra/launcher that choose our launchers: Hydra's default, the submitit and Ray plugins'.
BASIC, LOCAL, SLURM, RAY = "basic", "submitit_local", "submitit_slurm", "ray"
SWEEPER_GROUP, SEQUENTIAL = "hydra/sweeper", "sequential"
RAY_TARGET = "hydra_plugins.lerobot_hydra_launchers.launchers.RayLauncher"


@dataclass
class BasicLauncherConf:
    _target_: str = "hydra_plugins.lerobot_hydra_launchers.launchers.BasicLauncher"


@dataclass
class SequentialSweeperConf:
    """hydra/sweeper=sequential (launch/sequential_sweep.py): the baseline (a swept value, or its override), the
    difference to detect and the discordance expected (points), and the test's error rates."""

    _target_: str = "hydra_plugins.lerobot_hydra_launchers.launchers.SequentialSweeper"
    baseline: str | None = None
    detect: float | None = None
    discordance: float | None = None
    alpha: float = 0.05
    beta: float = 0.2


def _submitit_schemas() -> dict[str, Any]:
    """The submitit launchers' schemas: the plugin's, with our subclasses as `_target_` (none without the plugin,
    the `slurm` extra: then hydra/launcher=submitit_slurm is unknown, as without our launchers)."""
    try:
        from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf, SlurmQueueConf
    except ImportError:
        return {}

    @dataclass
    class LocalLauncherConf(LocalQueueConf):
        _target_: str = "hydra_plugins.lerobot_hydra_launchers.launchers.LocalLauncher"

    @dataclass
    class SlurmLauncherConf(SlurmQueueConf):
        _target_: str = "hydra_plugins.lerobot_hydra_launchers.launchers.SlurmLauncher"

    return {LOCAL: LocalLauncherConf, SLURM: SlurmLauncherConf}


def _ray_schemas() -> dict[str, Any]:
    """The Ray launcher's schema: the entry the hydra-ray-launcher plugin stores under hydra/launcher=ray (its
    `ray.init` and `ray.remote`), with our subclass as `_target_` (none without the plugin, the `ray` extra). The
    plugin's dataclass lives in a private module, so its stored entry is read instead (after plugin discovery)."""
    store = ConfigStore.instance()
    if f"{RAY}.yaml" not in store.list(GROUP):
        return {}
    plugin = store.load(f"{GROUP}/{RAY}.yaml")
    return {RAY: OmegaConf.merge(plugin.node, {"_target_": RAY_TARGET})}


def register() -> None:
    """Stores our launchers' schemas under the names Hydra and the submitit plugin store theirs."""
    from hydra.core.plugins import Plugins

    Plugins.instance()  # discovers Hydra's plugins (storing their entries) now, not after we store ours
    store = ConfigStore.instance()
    for name, node in {BASIC: BasicLauncherConf, **_submitit_schemas(), **_ray_schemas()}.items():
        store.store(group=GROUP, name=name, node=node, provider=PROVIDER)
    store.store(group=SWEEPER_GROUP, name=SEQUENTIAL, node=SequentialSweeperConf, provider=PROVIDER)
