"""A fit's input pipeline is freed after the call on the release thread, not on the cell's
path (worker/data/input_release.py): pure tests of the release itself, then on real workers with
Keras 3 (`import keras`) and tf-keras (`tf.keras`), both on the session's default cluster."""

import gc
import threading
import time
import weakref

import pytest
from tfmw_notebook.worker.data import input_release

from kernel_session import per_worker

RELEASE_THREAD = input_release.THREAD_NAME


class Pipeline:
    """Stands in for an input iterator; notes the thread that frees it."""

    def __init__(self, freed_on: list, hold: threading.Event | None = None):
        self.hold = hold
        weakref.finalize(self, self._note, freed_on, hold)

    @staticmethod
    def _note(freed_on: list, hold: threading.Event | None) -> None:
        if hold is not None:
            hold.wait(10)          # a free that takes long, as TensorFlow's can
        freed_on.append(threading.current_thread().name)


def wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_what_a_call_made_is_freed_after_it_on_the_release_thread():
    freed_on: list[str] = []
    with input_release.deferred():
        input_release._keep(Pipeline(freed_on))      # as Keras' patched iterator does
        with input_release.deferred():               # fit's own evaluate: part of the fit
            input_release._keep(Pipeline(freed_on))
        gc.collect()
        assert freed_on == []                        # kept while the call runs
    assert wait_for(lambda: len(freed_on) == 2)
    assert freed_on == [RELEASE_THREAD, RELEASE_THREAD]

    outside: list[str] = []
    input_release._keep(Pipeline(outside))           # no call under way: not kept
    gc.collect()
    assert outside == [threading.current_thread().name]


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_a_release_thread_that_is_behind_makes_the_next_free_happen_in_place():
    hold, freed_on = threading.Event(), []
    try:
        with input_release.deferred():
            input_release._keep(Pipeline(freed_on, hold))
        assert wait_for(lambda: input_release.pending() == 0)   # taken: the thread is busy
        for _ in range(input_release.MAX_PENDING):
            with input_release.deferred():
                input_release._keep(Pipeline(freed_on, hold))
        assert input_release.pending() == input_release.MAX_PENDING
        in_place: list[str] = []
        with input_release.deferred():
            input_release._keep(Pipeline(in_place))
        assert in_place == [threading.current_thread().name]
    finally:
        hold.set()
    assert wait_for(lambda: len(freed_on) == input_release.MAX_PENDING + 1)
    assert set(freed_on) == {RELEASE_THREAD}


# -- on real workers ---------------------------------------------------------------------

DATA = """
import numpy as np
_rng = np.random.default_rng(0)
release_x = _rng.standard_normal((256, 8)).astype("float32")
release_y = (release_x.sum(axis=1, keepdims=True) > 0).astype("float32")
release_data = tf.data.Dataset.from_tensor_slices((release_x, release_y)).repeat().batch(32)
release_model = {keras}.Sequential([{keras}.Input((8,)), {keras}.layers.Dense(1)])
release_model.compile(optimizer="sgd", loss="mse")
"""
# On the default workers `import keras` is Keras 3 and tf.keras is tf-keras: one cluster
# frees both Kerases' pipelines.
KERAS3_DATA = "import keras\n" + DATA.format(keras="keras")
TF_KERAS_DATA = DATA.format(keras="tf.keras")

# Each iterator Keras makes gets a finalizer that notes the thread freeing it. The fit's
# (its training and validation pipelines) must be freed by the release thread; predict is
# not a call tfmw wraps: Keras frees its pipeline in place, on the cell's thread.
WATCH = """
import threading as _threading, time as _time, weakref as _weakref
freed_on = []

def _watch(iterator):
    _weakref.finalize(iterator, lambda: freed_on.append(_threading.current_thread().name))

{patch}
try:
    release_model.fit(release_data, epochs=2, steps_per_epoch=4, verbose=0,
                      validation_data=release_data, validation_steps=2)
    _deadline = _time.monotonic() + 30
    while freed_on.count("{release}") < 2 and _time.monotonic() < _deadline:
        _time.sleep(0.02)
    freed_after_fit = list(freed_on)
    release_model.predict(release_x[:64], verbose=0)
    freed_after_predict = freed_on[len(freed_after_fit):]
finally:
    {unpatch}
"""

KERAS3_PATCH = WATCH.format(release=RELEASE_THREAD, patch="""
from keras.src.backend.tensorflow import trainer as _trainer
_init = _trainer.TFEpochIterator.__init__
def _watched_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    _watch(self)
_trainer.TFEpochIterator.__init__ = _watched_init
""", unpatch="_trainer.TFEpochIterator.__init__ = _init")

TF_KERAS_PATCH = WATCH.format(release=RELEASE_THREAD, patch="""
from tf_keras.src.engine import data_adapter as _adapter
_enumerate = _adapter.DataHandler.enumerate_epochs
def _watched_enumerate(self):
    for _epoch, _iterator in _enumerate(self):
        _watch(_iterator)
        yield _epoch, _iterator
_adapter.DataHandler.enumerate_epochs = _watched_enumerate
""", unpatch="_adapter.DataHandler.enumerate_epochs = _enumerate")


def check_released(kernel, data: str, cell: str, *, replaced_during_fit: bool) -> None:
    """`replaced_during_fit`: a pipeline the fit replaced while it ran (tf-keras' validation
    pass of the previous epoch) is freed then, in place, as Keras does."""
    kernel.ok("%%tfdist --no-dashboard --no-checkpoint\n" + data + cell, timeout=180)
    for rank, (after_fit, after_predict) in enumerate(zip(
            per_worker(kernel, "freed_after_fit"), per_worker(kernel, "freed_after_predict"))):
        released = [name for name in after_fit if name == RELEASE_THREAD]
        in_place = [name for name in after_fit if name != RELEASE_THREAD]
        assert len(released) >= 2, (rank, after_fit)      # the training and validation ones
        assert set(in_place) <= {"MainThread"}, (rank, after_fit)
        assert bool(in_place) == replaced_during_fit, (rank, after_fit)
        assert after_predict and set(after_predict) == {"MainThread"}, (rank, after_predict)


@pytest.mark.timeout(300)
def test_keras3_fit_pipelines_are_freed_on_the_release_thread(tf_kernel):
    check_released(tf_kernel, KERAS3_DATA, KERAS3_PATCH, replaced_during_fit=False)


@pytest.mark.timeout(300)
def test_tf_keras_fit_pipelines_are_freed_on_the_release_thread(tf_kernel):
    check_released(tf_kernel, TF_KERAS_DATA, TF_KERAS_PATCH, replaced_during_fit=True)
