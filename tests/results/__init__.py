"""Statistics, results, comparisons, the report page, plots and videos."""
