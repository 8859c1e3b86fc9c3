"""Where records and results go.

The run store and shard file, videos, plots, the report page, experiment loggers (W&B).
"""
