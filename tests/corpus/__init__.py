"""Real programs written elsewhere, run on 2 workers and in one process (see README.md)."""
