"""Benchmarks on their real simulators, and faults of envs and settings."""
