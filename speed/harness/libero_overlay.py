"""What `lerobot-eval` 0.6 needs to run LIBERO here, set up without touching the installed packages.

hf-libero asks questions on first import unless `LIBERO_CONFIG_PATH` holds a config (lerobot_hydra writes one,
see lerobot_hydra/envs/libero_setup.py), and lerobot-eval 0.6 finds the meshes only under hf-libero's own
`libero/libero/assets`, which hf-libero does not ship (the asset wheels install them elsewhere). So lerobot-eval
gets, first on its PYTHONPATH, an overlay of the `libero` package: folders of symlinks to the installed files, plus
`libero/libero/assets` linked to the asset wheels' tree.
"""

from __future__ import annotations

import os
from pathlib import Path


def libero_overlay(root: Path) -> dict[str, str]:
    """The environment variables for a lerobot-eval process that runs LIBERO (the overlay is built in `root`)."""
    from lerobot_hydra.envs.libero_setup import asset_roots, libero_package_dir, prepare_libero

    config_dir = prepare_libero()
    package = libero_package_dir()  # site-packages/libero/libero
    overlay = root / "libero_overlay"
    outer, inner = overlay / "libero", overlay / "libero" / "libero"
    inner.mkdir(parents=True, exist_ok=True)
    for entry in package.parent.iterdir():
        if entry.name != "libero":
            (outer / entry.name).symlink_to(entry)
    for entry in package.iterdir():
        (inner / entry.name).symlink_to(entry)
    roots = asset_roots()
    if len(roots) != 1:
        raise SystemExit(f"the LIBERO asset wheels are installed in {len(roots)} places; this script expects one")
    if not (inner / "assets").exists():
        (inner / "assets").symlink_to(roots[0])
    path = os.pathsep.join([str(overlay), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {"LIBERO_CONFIG_PATH": str(config_dir), "PYTHONPATH": path}
