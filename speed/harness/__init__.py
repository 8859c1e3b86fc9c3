"""What the benchmarks share: timed subprocesses and verdicts (timing.py), where a run's time goes (breakdown.py), and
lerobot-eval's LIBERO set-up (libero_overlay.py)."""
