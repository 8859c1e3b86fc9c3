"""A run's directory: the episode store, the shard file, the writer's lock and the `.hydra/` job files."""
