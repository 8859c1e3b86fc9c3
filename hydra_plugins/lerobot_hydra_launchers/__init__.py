"""lerobot_hydra's Hydra launchers (Hydra instantiates launchers from the `hydra_plugins` namespace package only)."""
