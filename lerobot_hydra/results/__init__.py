"""Results from episode records.

The one aggregation into typed results (aggregate), LeRobot's eval_info layout (eval_info), the console table
(table), statistics and paired comparisons.
"""
