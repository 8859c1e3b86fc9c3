"""From built envs and a policy to episode records.

The plan (units, shards, seeds), the runner, lanes, progress, stopping and provenance.
"""
