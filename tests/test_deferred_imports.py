"""A worker's start leaves Keras' optional extras unloaded (worker/boot/deferred_imports.py),
and a cell that uses them gets the real modules.

Real workers on Keras 3 (`--keras 3`: Keras is imported with TensorFlow, at the start).
"""

import pytest
from tfmw_notebook import TFCluster, WorkerFailed

pytestmark = pytest.mark.timeout(300)

STATE = ("import sys\n"
         "{name} = {{n: 'absent' if n not in sys.modules else type(sys.modules[n]).__name__\n"
         "           for n in ('keras', 'keras.wrappers', 'sklearn', 'matplotlib.pyplot')}}")

USE = '''
from keras.wrappers import SKLearnClassifier
import sklearn.base
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
used = [SKLearnClassifier.__name__, issubclass(SKLearnClassifier, sklearn.base.BaseEstimator),
        type(plt.figure()).__name__, plt is sys.modules["matplotlib.pyplot"]]
'''


def test_a_keras_3_worker_starts_without_keras_extras_and_a_cell_gets_them_whole():
    cluster = TFCluster.start(2, keras=3)
    try:
        cluster.run(STATE.format(name="at_start"))
        # A cell's error: its traceback is formatted on the worker, which looks through
        # every module (inspect) without running the deferred ones.
        with pytest.raises(WorkerFailed, match="ValueError: shown"):
            cluster.run("raise ValueError('shown')")
        cluster.run(STATE.format(name="after_error"))
        cluster.run(USE)
        cluster.run(STATE.format(name="after_use"))
        deferred = {"keras": "module", "keras.wrappers": "_DeferredModule",
                    "sklearn": "absent", "matplotlib.pyplot": "_DeferredModule"}
        for rank in range(2):
            seen = cluster.pull(["at_start", "after_error", "used", "after_use"], rank=rank)
            # Keras itself is loaded; its scikit-learn wrappers and pyplot wait for a use.
            assert seen["at_start"] == deferred
            assert seen["after_error"] == deferred
            assert seen["used"] == ["SKLearnClassifier", True, "Figure", True]
            assert seen["after_use"] == {"keras": "module", "keras.wrappers": "module",
                                         "sklearn": "module", "matplotlib.pyplot": "module"}
    finally:
        cluster.stop()
