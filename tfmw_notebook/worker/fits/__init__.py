"""What every Keras fit gets: hooks, callbacks, exact resume, preemption, the diagnosis."""
