"""Sweeps of shard jobs.

Launch checks, job outcomes, the merge and its checks, the multirun callback, summaries and comparisons.
"""
