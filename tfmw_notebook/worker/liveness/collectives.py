"""Can this worker group still do collectives together, after a cell failed?

When every worker raised, they are kept only if they agree on the next
collective: each collective launch takes the next instance key from the
strategy's counter, and a rank that launched one more than its peers would
pair the wrong operations from then on (or wait forever). Then one tiny
all-reduce with a timeout proves the collectives still work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..common import shared_strategy


@dataclass
class Probe:
    """The probe's all-reduce, traced by the first `probe` and called again by the later
    ones (with the timeout it was traced with)."""

    all_reduce_one: Callable[[], Any] | None = None


_probe = Probe()


def position() -> list[int]:
    """The strategy's collective counters: group keys, then instance keys per group.

    Device names differ between workers (task:0, task:1), so only the numbers
    are compared.
    """
    keys = shared_strategy.shared_strategy().extended._collective_keys
    counters = [keys._group_key]
    for group in sorted(keys._instance_key_table):
        counters.extend(sorted(keys._instance_key_table[group].values()))
    return counters


def probe(timeout_seconds: float) -> float:
    """One all-reduce of 1.0 over every replica; returns the replica count seen."""
    import tensorflow as tf

    strategy = shared_strategy.shared_strategy()
    if _probe.all_reduce_one is None:
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=timeout_seconds)

        def replica_sum():
            context = tf.distribute.get_replica_context()
            return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(1.0),
                                      options=options)

        @tf.function
        def all_reduce_one():
            return strategy.experimental_local_results(strategy.run(replica_sum))[0]

        _probe.all_reduce_one = all_reduce_one
    return float(_probe.all_reduce_one())


def sum_across(value: float, timeout_seconds: float = 60.0) -> float:
    """The sum of `value` over every worker (eager; every worker must call it)."""
    import tensorflow as tf

    strategy = shared_strategy.shared_strategy()
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout_seconds)

    def replica_sum():
        context = tf.distribute.get_replica_context()
        return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(value, tf.float32),
                                  options=options)

    # Run eagerly, TF warns of the overhead of eager collectives: not news for one number.
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        return float(strategy.experimental_local_results(strategy.run(replica_sum))[0])
    finally:
        logger.setLevel(level)
