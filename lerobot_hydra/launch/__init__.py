"""Launching a sweep's jobs: Hydra callbacks and what a sweep says about jobs that did not succeed."""
