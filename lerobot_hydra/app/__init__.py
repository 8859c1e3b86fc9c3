"""Entry points: `lerobot-hydra-eval` (main, evaluation) and `lerobot-hydra-autotune`."""
