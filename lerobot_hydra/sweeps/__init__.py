"""Merging a sweep's shards into results, the checks before merging, sweep summaries, baselines and compare."""
