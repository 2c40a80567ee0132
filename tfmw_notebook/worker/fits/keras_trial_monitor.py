"""The Keras callback of a sweep's trial: the monitored value per epoch, and the stop.

Every worker runs it and takes the same decision: the value compared is the mean
over the workers of each one's logged value (one all-reduce per epoch), so it is the
same number everywhere, even if a metric were computed from local data; a worker that
stopped alone would leave the others waiting in their next collective. Loaded
through keras_callbacks.py, which puts it on the model's Keras.
"""

from __future__ import annotations

import math

from ...protocol.run_options import TrialMonitor
from ..experiments import trial_report
from ..liveness import collectives
from .callback_logic import CallbackLogic


class TrialMonitorCallback(CallbackLogic):
    """Records `monitor.monitor` at each epoch's end; stops the fit when it is worse
    than that epoch's threshold (`model.stop_training`), unless it was the last epoch."""

    def __init__(self, monitor: TrialMonitor, *, world_size: int):
        super().__init__()
        self.monitor, self.world_size = monitor, world_size

    def on_train_begin(self, logs=None):
        trial_report.begin_fit()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        metric = self.monitor.key(logs)
        value = None
        if metric is not None:   # every worker logs the same names: all or none reduce
            value = collectives.sum_across(_number(logs[metric])) / max(1, self.world_size)
        trial_report.epoch_end(metric, value, list(logs))
        if value is None or not self.monitor.stops(epoch, value):
            return
        if epoch + 1 >= int((self.params or {}).get("epochs") or 0):
            return   # it finished: nothing left to stop
        self.model.stop_training = True
        trial_report.pruned(epoch + 1)


def _number(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number
