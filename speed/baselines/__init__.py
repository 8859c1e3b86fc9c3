"""Hand-written loops that benchmarks time eval.py against: what a user would write without the toolkit."""
