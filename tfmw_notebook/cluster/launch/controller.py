"""Entry point of the controllers we start: ipyparallel's, ended with its kernel.

With the ipc transport (engines in a private network, private_network.py),
ipyparallel's controller binds `<path>-<port>` while its engines and clients
connect to `<path>:<port>`; ours binds what they connect to.

Our engines start before the controller and read its connection file the moment
it exists; ipyparallel writes it in place, so an engine could read it empty and
exit. Ours appears whole (written aside, then renamed), readable by its owner only
from the start (it holds the session key).

An engine counts as registered once the heart monitor knows its heart. ipyparallel's
monitor learns of a new heart at the beat after its first answer, one period late
(250 ms with our period: a quarter of a second of every start and restart); ours takes
it at that first answer (`register_at_first_answer`).
"""

import json
import os
import tempfile


def _controller_class():
    from ipyparallel.controller.app import IPController

    class Controller(IPController):
        def construct_url(self, kind: str, channel: str, index=None):
            url = super().construct_url(kind, channel, index)
            interface = getattr(self, f"{kind}_info")["interface"]
            if interface.startswith("ipc://"):
                return interface + ":" + url[len(interface) + 1:]
            return url

        def save_connection_dict(self, fname, cdict):
            path = os.path.join(self.profile_dir.security_dir, fname)
            self.log.info("writing connection info to %s", path)
            write_whole(path, json.dumps(cdict, indent=2))

    return Controller


def register_at_first_answer(monitor_class) -> None:
    """A new heart joins the monitor's hearts (and the hub is told) when its first answer
    arrives, not at the next beat; the beat then counts it as a heart that answered."""
    answered = monitor_class.handle_pong

    def handle_pong(self, msg):
        answered(self, msg)
        heart = msg[0]
        if heart in self.responses and heart not in self.hearts:
            self.handle_new_hearts({heart})

    monitor_class.handle_pong = handle_pong


def write_whole(path: str, text: str) -> None:
    """Write `path` so that a reader sees either no file or all of it (mode 0600)."""
    folder = os.path.dirname(path)
    descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(descriptor, "w") as f:   # mkstemp: 0600 already
            f.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.remove(temporary)
        except OSError:
            pass
        raise


if __name__ == "__main__":
    from tfmw_notebook.protocol import orphan_guard

    orphan_guard.start()
    from ipyparallel.controller.heartmonitor import HeartMonitor

    register_at_first_answer(HeartMonitor)   # the monitor is a thread of this process
    _controller_class().launch_instance()
