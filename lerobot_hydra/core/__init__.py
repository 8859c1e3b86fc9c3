"""The bottom layer, depending on nothing else in the package.

Episode records, user errors, durable files, the run-dir lock, sweep labels, printed commands, the GL backend.
"""
