"""Console scripts: autotune."""
