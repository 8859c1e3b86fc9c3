"""Imported only by the worker forkserver (as a preload module, see vector.worker_servers.worker_context), never by
the main process: the forkserver ignores job-control signals, and the workers it forks inherit that."""

from lerobot_hydra.vector.worker_signals import ignore_job_signals

ignore_job_signals()
