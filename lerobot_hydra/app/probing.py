"""Composition of eval.py's config tree from its overrides, in one place, with the one-line errors: the Python API,
the paired comparison, the autotune's probes and the speed benchmarks compose with it (the command line composes
through `@hydra.main`, app/main.py). `register` puts what composing needs into Hydra and OmegaConf, explicitly:
the schemas (schemas/schema.py), our launchers and sweeper (launch/schemas.py), the job-dir resolver (app/cli.py)."""

from __future__ import annotations

from omegaconf import DictConfig

from lerobot_hydra.core.errors import UserError


def register() -> None:
    """Registers the schemas, our launchers' options and the resolvers; idempotent."""
    from omegaconf import OmegaConf

    from lerobot_hydra.app.cli import job_subdir_resolver
    from lerobot_hydra.launch import schemas as launcher_schemas
    from lerobot_hydra.schemas.schema import register_schemas

    register_schemas()
    launcher_schemas.register()
    OmegaConf.register_new_resolver("lerobot_hydra_job_subdir", job_subdir_resolver, replace=True)


def compose(overrides: list[str]) -> DictConfig:
    """The config tree `python eval.py <overrides>` runs; a user's mistake raises a one-line `UserError`."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from lerobot_hydra.app.cli import describe_hydra_error

    register()
    try:
        with initialize_config_module(config_module="lerobot_hydra.conf", version_base="1.3"):
            return hydra_compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        raise UserError(describe_hydra_error(err) or str(err).splitlines()[0]) from err
