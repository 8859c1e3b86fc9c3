"""The config tree, validation, printed commands and the package's layers."""
