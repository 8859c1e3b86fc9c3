"""Run dirs: the store, the shard file, the lock and the .hydra/ job files."""
