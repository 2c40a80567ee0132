"""An engine process becoming a worker: its start, TensorFlow's import, the bootstrap."""
