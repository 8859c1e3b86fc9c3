"""Speed benchmarks: each script times eval.py against a baseline measured in the same run and prints PASS or FAIL
against its target (results in README.md). Run one from the repository root as `python -m speed.<name>`."""
