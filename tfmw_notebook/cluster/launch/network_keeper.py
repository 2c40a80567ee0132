"""Holds the workers' private network namespace open (run as a script, inside it).

Started by private_network.py under `unshare --net`: it brings the namespace's
loopback up (a new namespace starts with it down), says "ready", and lives until
its stdin closes, that is until the notebook closes it or the kernel is gone.
Standard library only, and run as a file (not `-m`), so it starts in milliseconds.
"""

import fcntl
import signal
import socket
import struct
import sys

_GET_FLAGS, _SET_FLAGS, _UP = 0x8913, 0x8914, 0x1   # SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(probe.fileno(), _GET_FLAGS, request)[:18])[1]
        fcntl.ioctl(probe.fileno(), _SET_FLAGS, struct.pack("16sh", b"lo", flags | _UP))


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the notebook's interrupt is not for us
    try:
        loopback_up()
    except OSError as exc:
        print(f"cannot bring the loopback up ({exc.strerror})", flush=True)
        return 1
    print("ready", flush=True)
    while sys.stdin.buffer.read(4096):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
