"""Waits and polls shared by the notebook side: each wait has one deadline, set here."""

DEFAULT_TIMEOUT = 120.0  # seconds for engines and TensorFlow to come up, and for each call
POLL_SECONDS = 0.05      # how often a wait looks again
# A running worker whose heartbeat has not moved for this long is taken to be lost
# (its host down or cut off); beats come every second (events.HEARTBEAT_SECONDS).
SILENCE_SECONDS = 6.0
