"""A run: the context that owns its resources from start to end (context.py), and the sources of work that feed it
(sources/: a fixed plan, sequential rounds, dynamically claimed blocks)."""
