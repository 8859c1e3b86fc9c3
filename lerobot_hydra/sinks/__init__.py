"""Where records and results go.

The run store and shard file, videos, plots, the report page, and the experiment loggers (W&B, CSV) behind the
contract in base.py.
"""
