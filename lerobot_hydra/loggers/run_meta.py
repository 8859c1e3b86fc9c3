"""Which run a result set belongs to (`base.RunMeta`): a single evaluation, one shard of a sweep, the merge of a
sweep's shards, or a sweep's summary. Shards and merges of one sweep share a group named after the sweep directory,
and each gets a run id derived from the sweep, the combination and its role, so logging the same results again
updates the run instead of adding one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lerobot_hydra.core.layout import HYDRA_CONFIG_FILE, HYDRA_DIR
from lerobot_hydra.loggers.base import RunMeta

log = logging.getLogger("lerobot_hydra")

EVAL, SHARD, MERGED, SWEEP = "eval", "shard", "merged", "sweep"


def dir_name(path: Path) -> str:
    """A directory's last two path components: '2026-11-29_08-45-16' for outputs/multirun/2026-11-29/08-45-16."""
    parts = path.resolve().parts[-2:]
    return "_".join(p for p in parts if p != "/")


def plain_config(cfg: Any) -> dict[str, Any]:
    """The resolved config as plain containers; values that cannot be resolved are left out."""
    from omegaconf import DictConfig, OmegaConf

    node = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(dict(cfg))
    try:
        container = OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
    except Exception:  # noqa: BLE001 - fall back to what resolves
        container = {}
        for key in node:
            try:
                container[key] = OmegaConf.to_container(node[key], resolve=True, throw_on_missing=True)
            except Exception:  # noqa: BLE001 - a key that does not resolve is not logged
                continue
    assert isinstance(container, dict)
    return {str(k): v for k, v in container.items()}


def saved_run_config(run_dir: Path) -> dict[str, Any] | None:
    """The config Hydra saved for a run (`<run_dir>/.hydra/config.yaml`), or None when there is none."""
    from omegaconf import OmegaConf

    path = run_dir / HYDRA_DIR / HYDRA_CONFIG_FILE
    if not path.is_file():
        return None
    return plain_config(OmegaConf.load(path))


def hydra_sweep_dir() -> Path | None:
    """The sweep dir of the running Hydra multirun job, else None."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
            return Path(HydraConfig.get().sweep.dir)
    except Exception:  # noqa: BLE001 - outside Hydra there is no sweep
        return None
    return None


def _with_run(config: dict[str, Any], **run: Any) -> dict[str, Any]:
    return {**config, "run": {k: v for k, v in run.items() if v is not None}}


def _detail(label: str, role: str) -> str:
    return " ".join(part for part in (label, role) if part)


def single_run(cfg: Any, out_dir: Path, label: str = "") -> RunMeta:
    """A run that is not a shard; in a multirun (e.g. a sweep over policies) it joins the sweep's group."""
    sweep = hydra_sweep_dir()
    group = dir_name(sweep) if sweep is not None else None
    config = _with_run(plain_config(cfg), job_type=EVAL, out_dir=str(out_dir), sweep=group, label=label or None)
    # Outside a multirun the label is every override given, too long for a name; the config holds it.
    base, detail = (group, label) if group else (dir_name(out_dir), "")
    return RunMeta(EVAL, f"{out_dir.resolve()}|{EVAL}", base, detail, group, config)


def shard_run(cfg: Any, out_dir: Path, shard_id: int, num_shards: int, label: str = "") -> RunMeta:
    """Shard `shard_id` of a sweep, grouped with its sister shards and their merge. The sweep is Hydra's
    sweep dir in a multirun, else the parent of the shard's own dir."""
    sweep_dir = hydra_sweep_dir() or out_dir.parent
    group = dir_name(sweep_dir)
    role = f"shard {shard_id}/{num_shards}"
    config = _with_run(
        plain_config(cfg), job_type=SHARD, out_dir=str(out_dir), sweep=group, label=label or None, num_shards=num_shards
    )
    key = f"{sweep_dir.resolve()}|{label}|{role}"
    return RunMeta(SHARD, key, group, _detail(label, role), group, config, log_videos=False)


def merged_run(
    config: Mapping[str, Any] | Any, sweep_dir: Path, label: str = "", num_shards: int | None = None
) -> RunMeta:
    """The merge of one combination (`label`, e.g. 'policy=random'; '' for a sweep over shards only) of the
    sweep in `sweep_dir`; `config` is that combination's config (e.g. `saved_run_config(<a shard's dir>)`)."""
    group = dir_name(sweep_dir)
    plain = plain_config(config)
    if isinstance(plain.get("eval"), dict):
        plain["eval"] = {k: v for k, v in plain["eval"].items() if k != "shard_id"}
    plain = _with_run(
        plain, job_type=MERGED, out_dir=str(sweep_dir), sweep=group, label=label or None, num_shards=num_shards
    )
    key = f"{sweep_dir.resolve()}|{label}|{MERGED}"
    return RunMeta(MERGED, key, group, _detail(label, MERGED), group, plain)


def sweep_run(config: Mapping[str, Any] | Any, sweep_dir: Path, summary: Mapping[str, Any]) -> RunMeta:
    """The summary of the sweep in `sweep_dir` (its combinations, multi-seed pools and comparisons), in the sweep's
    group; `config` is one combination's config, of which only the logger settings matter."""
    group = dir_name(sweep_dir)
    labels = [row["label"] for row in summary["combinations"]]
    plain = _with_run(
        {}, job_type=SWEEP, out_dir=str(sweep_dir), sweep=group, combinations=labels, baseline=summary.get("baseline")
    )
    plain["logger"] = plain_config(config).get("logger")
    return RunMeta(SWEEP, f"{sweep_dir.resolve()}|{SWEEP}", group, "summary", group, plain, log_videos=False)
