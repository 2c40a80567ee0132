"""One notebook cell run on a worker, inside the shared strategy's scope."""
