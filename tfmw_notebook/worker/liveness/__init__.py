"""What the notebook hears while a cell runs: heartbeats, events, where a worker is."""
