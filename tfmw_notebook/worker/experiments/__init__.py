"""Experiment trackers and sweeps on the workers: one run, the chief's."""
