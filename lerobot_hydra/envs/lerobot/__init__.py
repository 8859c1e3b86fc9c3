"""`env=lerobot env.type=<type>`: any env type the installed LeRobot registers (its own, `lerobot_env_*` plugins,
Hub envs with env.trust_remote_code=true), simulated one task per sub-env inside our worker processes."""
