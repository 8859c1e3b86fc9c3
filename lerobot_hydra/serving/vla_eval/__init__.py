"""A client of vla-eval model servers (`policy=vla_eval`): docs/vla-eval.md."""
