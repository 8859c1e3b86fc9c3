"""What the tests and the speed scripts share: tiny LeRobot checkpoints built offline, the worker kills of the
fault soak and the envs that fail on chosen episodes (faulty_env.py). Not part of the installed package; importable
from the repository root (pytest's rootdir, and the speed scripts run as `python -m speed.<name>` from there)."""
