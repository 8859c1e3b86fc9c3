"""The config tree the autotune probes, composed from eval.py's overrides (benchmarks compose with it too)."""

from __future__ import annotations

from omegaconf import DictConfig

from lerobot_hydra.core.errors import UserError


def compose(overrides: list[str]) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    import lerobot_hydra.app.main  # noqa: F401  registers the schemas and resolvers
    from lerobot_hydra.app.cli import describe_hydra_error

    try:
        with initialize_config_module(config_module="lerobot_hydra.conf", version_base="1.3"):
            return hydra_compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        raise UserError(describe_hydra_error(err) or str(err).splitlines()[0]) from err
