"""The package draws nothing from the user's random generators on any worker: seeded code
(`keras.utils.set_random_seed`, `random.seed`, `np.random.seed`) gives every worker, chief
included, the same draws after a fit as before it, so a seeded model starts as in one
process. Was: the chief's automatic-checkpoint check drew from Python's `random`, and
Keras 3 seeds its unseeded initializers from that generator."""

import os

import pytest

pytestmark = pytest.mark.timeout(300)

SEEDED_FIT_THEN_DRAW = '''
import random
import numpy as np
random.seed(7)
np.random.seed(7)
model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(np.ones((64, 3)), np.ones((64, 1)), batch_size=16, epochs=2, verbose=0)
drawn = [random.random(), float(np.random.random())]
'''


def test_a_checkpointed_fit_leaves_the_seeded_draws_alike_on_every_worker(tf_kernel):
    kernel = tf_kernel
    out = kernel.ok("%%tfdist --name seeded-draws\n" + SEEDED_FIT_THEN_DRAW, timeout=180)
    # The fit was checkpointed (the chief's check of the run directory ran).
    assert os.listdir(os.path.join(kernel.cwd, "tfdist_checkpoints", "seeded-draws")), out.stdout
    drawn = kernel.ok("from tfmw_notebook.magics.session import active_cluster as _active\n"
                      "print([_active().pull(['drawn'], rank=r)['drawn'] for r in range(2)])")
    chief, other = eval(drawn.stdout.strip().splitlines()[-1])
    assert chief == other, (chief, other)
