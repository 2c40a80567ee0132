"""A recording comm that stands in for a kernel's, so widgets run without one."""

import itertools

import comm
import pytest

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class RecordingComm:
    """Takes the place of a kernel comm: keeps every message a widget sends."""

    _ids = itertools.count()

    def __init__(self, **open_args):
        self.comm_id = f"recording-comm-{next(self._ids)}"
        self.kernel = "fake"               # widgets only send when their comm has a kernel
        self.open_args = open_args
        self.messages = []

    def send(self, data=None, metadata=None, buffers=None):
        self.messages.append((data, buffers))

    def on_msg(self, callback):
        pass

    def close(self, *args, **kwargs):
        pass

    def updates(self, name):
        """The values of trait `name` sent to the front end, oldest first."""
        values = []
        for data, buffers in self.messages:
            if data.get("method") != "update":
                continue
            if name in data["state"]:
                values.append(data["state"][name])
            elif [name] in data.get("buffer_paths", []):      # bytes go as binary buffers
                values.append(bytes(buffers[data["buffer_paths"].index([name])]))
        return values


@pytest.fixture(autouse=True)
def recording_comms(monkeypatch):
    # ipywidgets opens a widget's comm through comm.create_comm.
    monkeypatch.setattr(comm, "create_comm", lambda **open_args: RecordingComm(**open_args))
