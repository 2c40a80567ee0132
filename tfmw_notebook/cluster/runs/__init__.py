"""What training leaves to compare: run records, sweeps and experiment tracking."""
