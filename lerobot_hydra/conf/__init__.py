"""The config tree Hydra composes (`pkg://lerobot_hydra.conf`): env, policy, eval and logger groups."""
