"""Policies: native ones (random, MetaWorld's scripted experts) and the LeRobot checkpoint loader."""
