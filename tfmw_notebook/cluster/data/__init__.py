"""Notebook data to the workers: `%%tfdist --shard` (each worker its own rows)."""
