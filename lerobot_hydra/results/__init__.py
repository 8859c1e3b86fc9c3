"""Results from episode records.

The one aggregation, LeRobot's eval_info layout, the console table, statistics and paired comparisons.
"""
