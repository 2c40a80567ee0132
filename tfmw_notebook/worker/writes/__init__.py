"""Files the workers write: only the chief's count, checkpoints, snapshots, logs."""
