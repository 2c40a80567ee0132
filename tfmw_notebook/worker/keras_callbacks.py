"""The Keras callbacks the workers add to a cell's fit() and evaluate(), all made one way.

A callback subclasses tf.keras.callbacks.Callback, so each is defined in a module of
its own that imports TensorFlow at its top (keras_reporting.py,
keras_checkpoint_saver.py, keras_resume_notice.py, keras_run_record.py,
keras_trial_monitor.py), and those modules are imported only by `keras_callbacks()`, the
first time a cell's call needs one. By then the bootstrap has set TF_USE_LEGACY_KERAS, so
tf.keras is tf-keras; and importing any other worker module never imports TensorFlow
(tests/test_worker_entry.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .keras_checkpoint_saver import CheckpointSaver
    from .keras_reporting import KerasReportingCallback
    from .keras_resume_notice import ResumeNotice
    from .keras_run_record import RunRecorder
    from .keras_trial_monitor import TrialMonitorCallback


class KerasCallbacks(NamedTuple):
    reporting: type[KerasReportingCallback]
    checkpoint_saver: type[CheckpointSaver]
    resume_notice: type[ResumeNotice]
    run_recorder: type[RunRecorder]
    trial_monitor: type[TrialMonitorCallback]


def keras_callbacks() -> KerasCallbacks:
    """The callback classes; the first call imports their modules (and TensorFlow)."""
    from .keras_checkpoint_saver import CheckpointSaver
    from .keras_reporting import KerasReportingCallback
    from .keras_resume_notice import ResumeNotice
    from .keras_run_record import RunRecorder
    from .keras_trial_monitor import TrialMonitorCallback

    return KerasCallbacks(KerasReportingCallback, CheckpointSaver, ResumeNotice, RunRecorder,
                          TrialMonitorCallback)
