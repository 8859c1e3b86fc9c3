"""Experiment loggers: CSV, W&B offline."""
