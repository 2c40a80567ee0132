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
it at that first answer (`register_at_first_answer`). That answer itself waits for the
monitor's next ping, on average half a period after the engine's heart starts (measured:
0.0-0.25 s of the 0.45 s between an engine's fork and its registration); ours pings every
10 ms from a heart's connection until it has answered (`ping_joining_hearts`).
"""

import json
import os
import tempfile
import time

# How often the monitor pings while a heart that connected has not answered, and for how
# long at most after its connection (then it waits for the next beat, as before).
JOIN_PING_SECONDS = 0.01
JOIN_PING_LIMIT_SECONDS = 2.0


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


class JoinPings:
    """Extra pings of the monitor's current beat while new hearts join.

    An engine's heart connects to the monitor when it starts (after the engine has
    registered with the hub and built its kernel); from that connection until it has
    answered (at most JOIN_PING_LIMIT_SECONDS) the monitor pings every JOIN_PING_SECONDS.
    A heart answers a ping with the ping's own text, and an answer to the current beat
    counts as a beat, so repeating that text changes nothing for the hearts already known.
    Runs on the monitor's event loop (its process may be a fork of the controller's)."""

    def __init__(self, monitor):
        import zmq
        from tornado.ioloop import IOLoop
        from zmq.eventloop.zmqstream import ZMQStream

        self.monitor = monitor
        self.loop = IOLoop.current()   # the monitor's (its own `loop` is looked up lazily)
        self.until = 0.0
        self.goal = 0        # hearts the monitor should know once those connecting answered
        self.pinging = False
        connections = monitor.pong_stream.socket.get_monitor_socket(zmq.EVENT_ACCEPTED)
        self.connections = ZMQStream(connections, self.loop)
        self.connections.on_recv(self._connected)

    def _connected(self, event) -> None:
        if not self.pinging:
            self.goal = len(self.monitor.hearts)
        self.goal += 1
        self.until = time.monotonic() + JOIN_PING_LIMIT_SECONDS
        if not self.pinging:
            self.pinging = True
            self._ping()

    def _ping(self) -> None:
        monitor = self.monitor
        if len(monitor.hearts) >= self.goal or time.monotonic() > self.until:
            self.pinging = False
            return
        monitor.ping_stream.send(str(monitor.lifetime).encode("ascii"))
        monitor.ping_stream.flush()
        self.loop.call_later(JOIN_PING_SECONDS, self._ping)


def ping_joining_hearts(monitor_class) -> None:
    """Each monitor started pings its joining hearts often (JoinPings)."""
    started = monitor_class.start

    def start(self):
        started(self)
        self.join_pings = JoinPings(self)

    monitor_class.start = start


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

    # The monitor runs in a process forked from this one, with these classes.
    register_at_first_answer(HeartMonitor)
    ping_joining_hearts(HeartMonitor)
    _controller_class().launch_instance()
