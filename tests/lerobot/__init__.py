"""LeRobot checkpoints built offline: families, per-row state, noise, RTC, both LeRobot lines, lerobot-eval parity."""
