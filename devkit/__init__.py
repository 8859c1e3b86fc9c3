"""What the tests and the speed scripts share: tiny LeRobot checkpoints built offline and the worker kills of the
fault soak. Not part of the installed package; importable from the repository root (pytest's rootdir, and the
speed scripts run as `python -m speed.<name>` from there)."""
