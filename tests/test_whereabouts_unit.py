"""Where a worker's main thread is (worker/liveness/whereabouts.py): the standard library, frozen
modules included, is looked through to the code that called it."""

import gc
import subprocess
import sys

import pytest
from tfmw_notebook.protocol.events import FRAMEWORK
from tfmw_notebook.worker.liveness import whereabouts

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_a_frozen_stdlib_frame_is_looked_through():
    assert whereabouts._in_stdlib("<frozen _collections_abc>")
    assert whereabouts._in_stdlib("<frozen os>")


def test_the_main_thread_in_a_frozen_module_called_from_tensorflow_is_the_framework(
        monkeypatch):
    """The stack of a trace caught iterating a mapping: innermost a frozen module's frame,
    then TensorFlow's: the framework, not the user's code."""

    class Code:
        def __init__(self, filename, name):
            self.co_filename, self.co_name = filename, name

    class Frame:
        def __init__(self, filename, name, back=None):
            self.f_code, self.f_lineno, self.f_back = Code(filename, name), 792, back

    tensorflow = Frame("/venv/lib/python3.11/site-packages/tensorflow/python/util/nest.py",
                       "flatten")
    stack = Frame("<frozen _collections_abc>", "items", back=tensorflow)
    main = whereabouts.threading.main_thread().ident
    monkeypatch.setattr(whereabouts.sys, "_current_frames", lambda: {main: stack})
    assert whereabouts.main_thread_whereabouts() == FRAMEWORK

    user = Frame("/home/me/train.py", "my_callback")
    monkeypatch.setattr(whereabouts.sys, "_current_frames",
                        lambda: {main: Frame("<frozen os>", "fspath", back=user)})
    assert whereabouts.main_thread_whereabouts() == "/home/me/train.py:792 in my_callback"


# The heartbeat's sampling (sys._current_frames) meets a garbage collection that frees a
# threading.local, as TensorFlow's graphs hold: middle-generation garbage, and thresholds
# that collect that generation at the sampling's allocations. Before Python 3.12 the
# collection ran under the interpreter's thread-list lock, and the local's freeing took it
# again: the process froze for good, holding the GIL (CPython gh-106883).
SAMPLING_MEETS_A_COLLECTION = """
import gc, sys, threading, time
from tfmw_notebook.worker.liveness.whereabouts import main_thread_whereabouts

class HoldsALocal:
    def __init__(self):
        self.local = threading.local()
        self.cycle = self

for _ in range(5):
    others = [threading.Thread(target=time.sleep, args=(0.2,)) for _ in range(4)]
    for thread in others:
        thread.start()          # their frames are made by the sampling, under the lock
    gc.collect()
    held = HoldsALocal()
    gc.collect(0)               # it survives a young collection
    del held                    # garbage in the middle generation
    gc.set_threshold(1, 1, 1000)
    main_thread_whereabouts()
    gc.set_threshold(700, 10, 10)
    for thread in others:
        thread.join()
assert gc.isenabled()
print("sampled")
"""


def test_sampling_the_main_thread_never_deadlocks_in_a_garbage_collection():
    try:
        done = subprocess.run([sys.executable, "-c", SAMPLING_MEETS_A_COLLECTION],
                              capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("the sampling froze its process (a collection inside sys._current_frames)")
    assert done.returncode == 0 and done.stdout.strip() == "sampled", done.stderr


def test_sampling_leaves_the_collector_as_it_found_it():
    gc.disable()
    try:
        whereabouts.current_frames()
        assert not gc.isenabled()        # the user's choice stands
    finally:
        gc.enable()
    whereabouts.current_frames()
    assert gc.isenabled()
