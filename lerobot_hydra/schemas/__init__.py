"""Structured-config schemas (`schema`) and the checks of user settings that need more than a schema (`validation`)."""
