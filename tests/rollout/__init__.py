"""Vector envs, mixed-task batches, capabilities, stopping, progress and provenance."""
