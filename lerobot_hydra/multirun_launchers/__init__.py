"""Hydra launcher presets (`hydra/launcher=...`), on the search path as `pkg://lerobot_hydra.multirun_launchers`."""
