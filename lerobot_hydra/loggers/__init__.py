"""Experiment loggers (mirrors `conf/logger`): the contract (`base`), run metadata, CSV and Weights & Biases."""
