"""Observation and action steps, instantiated from `processors.pre` / `processors.post` in the env YAMLs."""
