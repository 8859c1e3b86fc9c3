"""What is produced from typed results: eval_info.json and the tables (`publish`), the report page, plots, videos."""
