"""Simulated hosts on this machine, for tests that need several "machines".

Each host is a network namespace joined to one bridge in the default namespace by a
veth pair, with its own address and, per process tree, its own hostname (a fresh UTS
namespace). The filesystem, users, Python and virtualenv stay shared, so whatever a
test starts on a host runs the same code as the test itself.

Addresses come from 198.18.0.0/15, which RFC 2544 sets aside for network tests.
Every name made here starts with a prefix and carries a random suffix, so two runs do
not collide and a killed run's leftovers can be found and removed later.

Needs root, iproute2 (`ip`) and util-linux (`unshare`, `hostname`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from functools import cache

log = logging.getLogger(__name__)

TEST_NET = ipaddress.ip_network("198.18.0.0/15")
DEFAULT_PREFIX = "tfmwh"
CMD_TIMEOUT = 15.0  # for every `ip` / `iptables` call
IFNAMSIZ = 15  # longest Linux interface name


@dataclass(frozen=True)
class SimHost:
    name: str  # e.g. "tfmwh1"
    namespace: str  # e.g. "tfmwh1-3fa0"
    address: str  # e.g. "198.18.0.11"
    hostname: str  # e.g. "simhost1"
    veth: str  # bridge-side end of the host's cable (the host side is "eth0")


def _cmd(argv: list[str], check: bool = True, timeout: float = CMD_TIMEOUT) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _try(argv: list[str]) -> bool:
    """Run a command whose failure is acceptable (cleanup); report whether it worked."""
    try:
        _cmd(argv)
        return True
    except Exception as e:  # cleanup must go on
        log.debug("%s", e)
        return False


def _start_time(pid: int) -> str | None:
    # A pid alone can be reused; the pair (pid, start time) names one process.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_tag() -> str:
    return f"owner {os.getpid()} {_start_time(os.getpid())}"


def _owner_alive(tag: str) -> bool:
    parts = tag.split()
    if len(parts) != 3 or parts[0] != "owner" or not parts[1].isdigit():
        return False
    return _start_time(int(parts[1])) == parts[2]


def _netns_names() -> list[str]:
    out = _cmd(["ip", "-j", "netns", "list"]).strip()
    return [entry["name"] for entry in json.loads(out or "[]")]


def _links(kind: str) -> list[dict]:
    return json.loads(_cmd(["ip", "-j", "link", "show", "type", kind]).strip() or "[]")


def _netns_pids(namespace: str) -> list[int]:
    out = _cmd(["ip", "netns", "pids", namespace], check=False)
    return [int(p) for p in out.split() if p.isdigit() and int(p) != os.getpid()]


def _kill_namespace_processes(namespaces: list[str], deadline_s: float = 10.0) -> list[int]:
    """SIGKILL everything living in the namespaces until none is left; return what is left."""
    deadline = time.monotonic() + deadline_s
    while True:
        pids = [pid for ns in namespaces for pid in _netns_pids(ns)]
        if not pids or time.monotonic() > deadline:
            return pids
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _forward_through_firewall_rules(bridge: str) -> list[list[str]]:
    """iptables rules that let traffic on the bridge through a restrictive firewall.

    With br_netfilter loaded (net.bridge.bridge-nf-call-iptables = 1), frames between
    two bridge ports pass the FORWARD chain, which e.g. Docker sets to DROP; traffic
    between hosts and the bridge address passes INPUT/OUTPUT. Only chains that could
    drop something get a rule, and each rule names our bridge, so nothing else changes.
    """
    if shutil.which("iptables") is None:
        return []
    chains = {"INPUT": ["-i", bridge], "OUTPUT": ["-o", bridge]}
    try:
        with open("/proc/sys/net/bridge/bridge-nf-call-iptables") as f:
            if f.read().strip() == "1":
                chains["FORWARD"] = ["-i", bridge, "-o", bridge]
    except OSError:
        pass  # no br_netfilter: bridged frames never reach iptables
    rules = []
    for chain, match in chains.items():
        listing = _cmd(["iptables", "-w", "5", "-S", chain], check=False).splitlines()
        permissive = listing == [f"-P {chain} ACCEPT"]
        if listing and not permissive:
            rules.append([chain, *match, "-j", "ACCEPT"])
    return rules


def _remove_iptables_rules_for(interface_re: re.Pattern, keep: set[str]) -> list[str]:
    """Delete our ACCEPT rules naming an interface that matches and is not in `keep`."""
    if shutil.which("iptables") is None:
        return []
    removed = []
    for line in _cmd(["iptables", "-w", "5", "-S"], check=False).splitlines():
        words = line.split()
        if len(words) < 2 or words[0] != "-A":
            continue
        names = {w for w in words if interface_re.match(w)}
        if names and not names & keep and _try(["iptables", "-w", "5", "-D", *words[1:]]):
            removed.append(line)
    return removed


def _pick_subnet() -> ipaddress.IPv4Network:
    """A /24 of the test network that no interface or route here uses yet."""
    used = []
    for argv in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        for word in _cmd(argv, check=False).split():
            with contextlib.suppress(ValueError):
                used.append(ipaddress.ip_network(word, strict=False))
    candidates = list(TEST_NET.subnets(new_prefix=24))
    random.shuffle(candidates)
    for net in candidates:
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise RuntimeError(f"no free /24 left in {TEST_NET}")


def _name_patterns(prefix: str) -> tuple[re.Pattern, re.Pattern]:
    p = re.escape(prefix)
    # namespaces: <prefix><i>-<suffix>; links: <prefix>-<suffix> (bridge), <prefix>-<suffix>-<i>
    return re.compile(rf"^{p}\d+-([0-9a-f]{{4}})$"), re.compile(rf"^{p}-([0-9a-f]{{4}})(-\d+)?$")


def remove_leftovers(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Remove namespaces, links and iptables rules left by earlier runs that were killed.

    A run's bridge carries its owner's pid and start time in its alias; everything of a
    run whose owner still lives is kept, so concurrent runs do not break each other.
    Returns what was removed. Never raises.
    """
    removed: list[str] = []
    try:
        ns_re, link_re = _name_patterns(prefix)
        live = set()
        bridges = []
        for link in _links("bridge"):
            m = link_re.match(link["ifname"])
            if m and not m.group(2):
                bridges.append(link["ifname"])
                if _owner_alive(link.get("ifalias", "")):
                    live.add(m.group(1))
        stale_ns = [ns for ns in _netns_names()
                    if (m := ns_re.match(ns)) and m.group(1) not in live]
        _kill_namespace_processes(stale_ns)
        for link in _links("veth") + [{"ifname": b} for b in bridges]:
            name = link["ifname"]
            m = link_re.match(name)
            if m and m.group(1) not in live and _try(["ip", "link", "del", name]):
                removed.append(name)
        for ns in stale_ns:
            if _try(["ip", "netns", "del", ns]):
                removed.append(ns)
        live_bridges = {f"{prefix}-{suffix}" for suffix in live}
        removed += _remove_iptables_rules_for(link_re, live_bridges)
    except Exception as e:  # a best effort before a test
        log.warning("could not remove leftovers of %r: %s", prefix, e)
    if removed:
        log.warning("removed leftovers of earlier runs: %s", removed)
    return removed


@cache
def unavailable_reason() -> str | None:
    """Why simulated hosts cannot run here, or None if they can."""
    if os.geteuid() != 0:
        return "simulated hosts need root (network namespaces, veth, bridge)"
    for tool in ("ip", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return f"simulated hosts need `{tool}` (Debian packages iproute2, util-linux, hostname)"
    probe = f"{DEFAULT_PREFIX}probe-{secrets.token_hex(2)}"
    try:
        _cmd(["ip", "netns", "add", probe])
        try:
            _cmd(["ip", "netns", "exec", probe, "unshare", "--uts", "hostname", "probe"])
        finally:
            _try(["ip", "netns", "del", probe])
        _cmd(["ip", "link", "add", probe[:IFNAMSIZ], "type", "bridge"])
        _try(["ip", "link", "del", probe[:IFNAMSIZ]])
    except Exception as e:  # any failure means "cannot run here"
        return f"cannot create a network namespace / UTS namespace / bridge here: {e}"
    return None


class SimHosts:
    """N simulated hosts: one network namespace each, on one bridge, own address and hostname."""

    def __init__(self, n: int, prefix: str = DEFAULT_PREFIX):
        suffix = secrets.token_hex(2)
        self.prefix = prefix
        self.bridge = f"{prefix}-{suffix}"
        if not 1 <= n <= 200 or len(f"{self.bridge}-{n}") > IFNAMSIZ:
            raise ValueError(f"n={n}, prefix={prefix!r}: need 1..200 hosts and a short prefix")
        self.subnet = _pick_subnet()
        base = self.subnet.network_address
        self.bridge_address = str(base + 1)
        self.hosts = [
            SimHost(
                name=f"{prefix}{i}",
                namespace=f"{prefix}{i}-{suffix}",
                address=str(base + 10 + i),
                hostname=f"simhost{i}",
                veth=f"{self.bridge}-{i}",
            )
            for i in range(1, n + 1)
        ]
        self._undo: list[list[str]] = []  # commands that take back what create() made
        self._procs: list[subprocess.Popen] = []

    def create(self) -> SimHosts:
        """Make the bridge, namespaces and cables; on any failure take it all back and raise."""
        try:
            self._create()
        except BaseException:
            self.cleanup()
            raise
        return self

    def _make(self, argv: list[str], undo: list[str] | None = None) -> None:
        if undo:  # registered first: a command that timed out may still have done its work
            self._undo.append(undo)
        _cmd(argv)

    def _create(self) -> None:
        plen = self.subnet.prefixlen
        br = self.bridge
        # The bridge comes first and carries the owner tag: remove_leftovers() judges by it.
        self._make(["ip", "link", "add", br, "type", "bridge", "forward_delay", "0"],
                   undo=["ip", "link", "del", br])
        self._make(["ip", "link", "set", br, "alias", _owner_tag()])
        self._make(["ip", "addr", "add", f"{self.bridge_address}/{plen}", "dev", br])
        self._make(["ip", "link", "set", br, "up"])
        for rule in _forward_through_firewall_rules(br):
            self._make(["iptables", "-w", "5", "-I", *rule],
                       undo=["iptables", "-w", "5", "-D", *rule])
        for h in self.hosts:
            ns = h.namespace
            self._make(["ip", "netns", "add", ns], undo=["ip", "netns", "del", ns])
            # The host end is created inside the namespace under the name a machine would use.
            self._make(["ip", "link", "add", h.veth, "type", "veth",
                        "peer", "name", "eth0", "netns", ns],
                       undo=["ip", "link", "del", h.veth])
            self._make(["ip", "link", "set", h.veth, "master", br, "up"])
            self._make(["ip", "-n", ns, "link", "set", "lo", "up"])
            self._make(["ip", "-n", ns, "addr", "add", f"{h.address}/{plen}", "dev", "eth0"])
            self._make(["ip", "-n", ns, "link", "set", "eth0", "up"])
            self._make(["ip", "-n", ns, "route", "add", "default", "via", self.bridge_address])

    def popen(self, host: SimHost, argv: list[str], **popen_kwargs) -> subprocess.Popen:
        """Start argv on the host: in its network namespace, under its own hostname.

        `ip netns exec` and `unshare` exec rather than fork, so the Popen's pid is argv's.
        """
        wrapped = ["ip", "netns", "exec", host.namespace, "unshare", "--uts",
                   "sh", "-c", 'hostname "$0" && exec "$@"', host.hostname, *argv]
        proc = subprocess.Popen(wrapped, **popen_kwargs)
        self._procs = [p for p in self._procs if p.poll() is None] + [proc]
        return proc

    def run(self, host: SimHost, argv: list[str], timeout: float = 30,
            check: bool = False) -> subprocess.CompletedProcess:
        """Run argv on the host and wait for it (text output captured)."""
        proc = self.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            # Children that kept the pipes open are killed by cleanup(); do not wait for them.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=5)
            raise
        done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
        if check:
            done.check_returncode()
        return done

    def link_down(self, host: SimHost) -> None:
        """Cut the host's cable: its eth0 loses carrier, packets vanish (no resets)."""
        _cmd(["ip", "link", "set", host.veth, "down"])

    def link_up(self, host: SimHost) -> None:
        _cmd(["ip", "link", "set", host.veth, "up"])

    def pids(self, host: SimHost) -> list[int]:
        """Every process living in the host's network namespace."""
        return _netns_pids(host.namespace)

    def cleanup(self) -> None:
        """Kill every process on the hosts and remove everything create() made. Never raises."""
        try:
            left = _kill_namespace_processes([h.namespace for h in self.hosts])
            if left:
                log.warning("processes survived SIGKILL on simulated hosts: %s", left)
            for proc in self._procs:  # reap our own children, close their pipes
                with contextlib.suppress(Exception):
                    proc.kill()
                    proc.communicate(timeout=2)
            self._procs.clear()
        except Exception as e:  # cleanup must go on
            log.warning("killing processes on simulated hosts failed: %s", e)
        while self._undo:
            _try(self._undo.pop())

    def __enter__(self) -> SimHosts:
        return self.create()

    def __exit__(self, *exc) -> None:
        self.cleanup()


@contextlib.contextmanager
def sim_hosts_or_skip(n: int, prefix: str = DEFAULT_PREFIX):
    """`with sim_hosts_or_skip(2) as sim:` in a test or fixture; skips where hosts cannot run."""
    import pytest

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    remove_leftovers(prefix)
    with SimHosts(n, prefix) as sim:
        yield sim
