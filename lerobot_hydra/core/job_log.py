"""Lines meant for the run's job log (`eval.log`) only, such as a simulator's traceback: the console shows the
one-line warning that goes with them (store/job_files.py keeps them off the console while the run has a job log)."""

from __future__ import annotations

import logging

# `extra=` of a log call whose line belongs in the job log only.
JOB_LOG_ONLY = {"job_log_only": True}


class OffConsole(logging.Filter):
    """Passes every line but those logged with `extra=JOB_LOG_ONLY`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "job_log_only", False)
