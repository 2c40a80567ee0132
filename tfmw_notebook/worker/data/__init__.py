"""The rows a worker holds (`--shard`) and the input pipelines it frees."""
