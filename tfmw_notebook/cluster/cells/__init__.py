"""A cell on every worker: sent through the one door to the workers' code, watched
until all finish or one fails, and recovered from (kept, restarted, shrunk, replayed)."""
