"""Sharded sweeps on the local SLURM cluster and as local processes, and cluster faults."""
