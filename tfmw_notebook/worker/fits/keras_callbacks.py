"""The Keras callbacks the workers add to a cell's fit() and evaluate(), all made one way.

Each callback's logic is a plain class in a module of its own (keras_reporting.py,
keras_checkpoint_saver.py, keras_resume_notice.py, keras_resume_point.py, keras_run_record.py,
keras_trial_monitor.py, keras_preemption.py); `keras_callbacks(keras)` puts it on the
`Callback` class of the Keras the model belongs to. On the default workers `tf.keras` is
tf-keras while `import keras` gives Keras 3, and both fit in one cluster: each gets callbacks
of its own Keras (a callback of one Keras is not driven by the other's fit). Those modules
are imported only here, the first time a cell's call needs one, so importing any other
worker module never imports TensorFlow (tests/test_worker_entry.py).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .keras_checkpoint_saver import CheckpointSaver
    from .keras_preemption import PreemptionSave
    from .keras_reporting import KerasReportingCallback
    from .keras_resume_notice import ResumeNotice
    from .keras_resume_point import ResumePoint
    from .keras_run_record import RunRecorder
    from .keras_trial_monitor import TrialMonitorCallback


class KerasCallbacks(NamedTuple):
    reporting: type[KerasReportingCallback]
    checkpoint_saver: type[CheckpointSaver]
    resume_notice: type[ResumeNotice]
    run_recorder: type[RunRecorder]
    trial_monitor: type[TrialMonitorCallback]
    resume_point: type[ResumePoint]
    preemption_save: type[PreemptionSave]


def callback_logic() -> KerasCallbacks:
    """The callbacks' logic classes (no Keras base): what `isinstance` checks against."""
    from .keras_checkpoint_saver import CheckpointSaver
    from .keras_preemption import PreemptionSave
    from .keras_reporting import KerasReportingCallback
    from .keras_resume_notice import ResumeNotice
    from .keras_resume_point import ResumePoint
    from .keras_run_record import RunRecorder
    from .keras_trial_monitor import TrialMonitorCallback

    return KerasCallbacks(KerasReportingCallback, CheckpointSaver, ResumeNotice, RunRecorder,
                          TrialMonitorCallback, ResumePoint, PreemptionSave)


def keras_callbacks(keras: Any = None) -> KerasCallbacks:
    """The callback classes for models of the Keras module `keras` (`tf_keras` or `keras`;
    None: `tf.keras`). The first call imports their modules (and TensorFlow)."""
    if keras is None:
        import tensorflow as tf

        keras = tf.keras
    return _on_base(keras.callbacks.Callback)


@functools.cache
def _on_base(base: type) -> KerasCallbacks:
    """Each logic class with `base` after it: its `super()` calls reach Keras' Callback."""
    return KerasCallbacks(*(
        type(logic.__name__, (logic, base),
             {"__module__": logic.__module__, "__qualname__": logic.__qualname__})
        for logic in callback_logic()))
