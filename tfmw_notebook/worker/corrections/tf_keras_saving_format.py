"""tf-keras saves every `.keras` file as a Keras archive, in whichever thread it runs.

tf-keras keeps "the Keras archive format is on" in a thread-local flag that only the importing
thread starts with. `save_model` and `load_model` save the flag with a default of False, turn
it on, and put the saved value back, so in any other thread the first `.keras` save turns the
flag off for good: from the second save on, `model.save("x.keras")` writes an HDF5 file under
that name (with a "legacy HDF5" warning) and loading it back gives a different model class.
Measured with tf-keras 2.21 in a plain thread, and on the workers, whose cells run outside the
thread that imported tf-keras (the tutorial's second `.keras` save was not a zip archive).
Here the flag is on by default in every thread; turning it off still works per thread.
"""

from __future__ import annotations

import threading
from typing import Any

from ..common import guarded_patches
from ..common.import_hooks import when_imported

_MARK = "_tfmw_on_by_default"


def install() -> None:
    """Correct tf-keras' flag when its saving library is imported (now, if it is)."""
    when_imported("tf_keras.src.saving.saving_lib", _archive_format_on_in_every_thread)


class _OnByDefault(threading.local):
    value = True      # what a thread reads until it sets its own value
    _tfmw_on_by_default = True


def _archive_format_on_in_every_thread(saving_lib: Any) -> None:
    guarded_patches.patch(
        "tf_keras_saving_format", "tf_keras.src.saving.saving_lib._SAVING_V3_ENABLED",
        lambda: _thread_local_flag(saving_lib), lambda flag: _on_by_default(saving_lib, flag),
        risk="a second model.save('x.keras') in a cell may write HDF5 under that name",
        library="tf_keras")


def _thread_local_flag(saving_lib: Any) -> Any:
    flag = guarded_patches.attribute(saving_lib, "_SAVING_V3_ENABLED")
    if not isinstance(flag, threading.local):
        raise guarded_patches.TargetChanged(
            f"_SAVING_V3_ENABLED is a {type(flag).__name__}, not a threading.local")
    return flag


def _on_by_default(saving_lib: Any, flag: Any) -> None:
    if getattr(flag, _MARK, False):
        return
    replacement = _OnByDefault()
    replacement.value = getattr(flag, "value", True)   # keep this thread's current value
    saving_lib._SAVING_V3_ENABLED = replacement
