"""An example lerobot_hydra plugin: a one-dimensional reaching benchmark and a PD controller that solves it."""
