"""Helpers shared by the tests and the speed scripts: test envs, checkpoints built offline, readers."""
