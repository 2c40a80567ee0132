"""Where a worker's main thread is (worker/whereabouts.py): the standard library, frozen
modules included, is looked through to the code that called it."""

import pytest
from tfmw_notebook.protocol.events import FRAMEWORK
from tfmw_notebook.worker import whereabouts

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
