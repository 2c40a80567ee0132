"""Entry point of the controllers we start: ipyparallel's, ended with its kernel.

With the ipc transport (engines in a private network, private_network.py),
ipyparallel's controller binds `<path>-<port>` while its engines and clients
connect to `<path>:<port>`; ours binds what they connect to.
"""


def _controller_class():
    from ipyparallel.controller.app import IPController

    class Controller(IPController):
        def construct_url(self, kind: str, channel: str, index=None):
            url = super().construct_url(kind, channel, index)
            interface = getattr(self, f"{kind}_info")["interface"]
            if interface.startswith("ipc://"):
                return interface + ":" + url[len(interface) + 1:]
            return url

    return Controller


if __name__ == "__main__":
    from tfmw_notebook import orphan_guard

    orphan_guard.start()
    _controller_class().launch_instance()
