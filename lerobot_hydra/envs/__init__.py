"""Benchmarks: one module per benchmark (config + simulator wrapper), the generic Gymnasium path and the vector env."""
