"""What ipyparallel's launchers know of the engine processes they started on this host.

Whether an engine's process has ended, the last line of its log, how it ended; and the
ends of a group's engine sets: stopping those whose engines all ended, or ending every
engine a set still runs. Engines on other hosts (SSH, batch launchers) have no process
here: for them these say nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Collection

import ipyparallel as ipp
from ipyparallel.cluster.launcher import SSHLauncher

_log = logging.getLogger("tfmw_notebook")
_EXIT_CODE_SECONDS = 2.0  # how long the launcher gets to reap a dead engine


def ended_engines(cluster: ipp.Cluster | None, engine_sets: Collection[str]) -> dict[str, str]:
    """{engine: the last line of its log} for the engines in these engine sets whose
    process has ended.

    Two places to look: ipyparallel moves an ended engine out of its set (keeping its
    output) only while its event loop runs, e.g. during the controller's start; one
    that ended since is still in the set, its process gone."""
    ended = {}
    for set_id, engine_set in list(getattr(cluster, "engines", {}).items()):
        if set_id not in engine_sets:
            continue
        outputs = getattr(engine_set, "outputs", {})
        # stop_data is None until a set stops (and for batch launchers, which never poll).
        stop_data = getattr(engine_set, "stop_data", None) or {}
        for identifier in list(stop_data.get("engines", {})):
            ended[f"{set_id}/{identifier}"] = last_line(outputs.get(identifier) or "")
        for identifier, launcher in list(getattr(engine_set, "launchers", {}).items()):
            if process_ended(launcher):
                ended[f"{set_id}/{identifier}"] = last_line(launcher.get_output() or "")
    return ended


def exit_code(cluster: ipp.Cluster | None, pid: int,
              wait: float = _EXIT_CODE_SECONDS) -> int | str | None:
    """How the engine process `pid` that `cluster`'s launcher started ended (a negative
    signal number, an exit code); None if unknown: not launched here, or not reaped
    within `wait` s."""
    for engine_set in list(getattr(cluster, "engines", {}).values()):
        for launcher in list(getattr(engine_set, "launchers", {}).values()):
            if getattr(launcher, "pid", None) == pid:
                return _reaped_code(launcher, wait)
        # Once ipyparallel's loop noticed the end, the set keeps only its stop data.
        stopped = (getattr(engine_set, "stop_data", None) or {}).get("engines", {})
        for data in list(stopped.values()):
            if data.get("pid") == pid:
                return data.get("exit_code")
    return None


def _reaped_code(launcher, wait: float) -> int | str | None:
    """The exit code the launcher's own waiting thread collected (it reaps the process;
    a second waiter would get nothing): psutil keeps it on the process object."""
    waiter = getattr(launcher, "_wait_thread", None)
    process = getattr(launcher, "process", None)
    if waiter is None or process is None:
        return None
    waiter.join(timeout=wait)
    if waiter.is_alive():
        return None
    try:
        return process.wait(0)
    except Exception:  # psutil: not ours after all, or gone without a status
        return None


def process_ended(launcher) -> bool:
    process = getattr(launcher, "process", None)  # None for launchers of remote engines
    if process is None:
        return False
    try:
        return not process.is_running() or process.status() == "zombie"
    except Exception:  # psutil: gone between the two looks
        return True


def last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][-300:] if lines else "(empty log)"


def stop_ended_sets(cluster: ipp.Cluster) -> None:
    """Let the launcher close each engine set of this host whose engines all ended."""
    for set_id, engine_set in list(cluster.engines.items()):
        launchers = list(getattr(engine_set, "launchers", {}).values())
        if launchers and all(process_ended(each) for each in launchers):
            try:
                cluster.stop_engines_sync(set_id)
            except Exception:
                _log.debug("could not close engine set %s", set_id, exc_info=True)


def stop_engine_sets(cluster: ipp.Cluster, set_ids: Collection[str] | None = None) -> None:
    """Let the launcher end the engine sets `set_ids` (all by default), whose engines were
    killed already or end with this stop: all at once (the SSH launcher's stop waits on
    each engine over ssh)."""
    chosen = [set_id for set_id in (list(cluster.engines) if set_ids is None else set_ids)
              if set_id in cluster.engines]
    _skip_output_fetch(cluster, chosen)

    async def stop_each() -> list:
        return await asyncio.gather(*(cluster.stop_engines(set_id) for set_id in chosen),
                                    return_exceptions=True)

    try:
        # How ipyparallel runs each `*_sync` method: here one coroutine for every set.
        failures = [r for r in cluster._synchronize(stop_each) if isinstance(r, Exception)]
    except Exception as exc:
        failures = [exc]
    # The engines were killed already (through their nannies); a launcher that then fails
    # to signal them (SSH: "no such process") has nothing left to stop.
    for failure in failures:
        _log.warning("stopping engines through the launcher: %r", failure)


def _skip_output_fetch(cluster: ipp.Cluster, set_ids: Collection[str]) -> None:
    """Stopping an engine set fetches each engine's output file; with the SSH launcher, one
    that is gone costs 10 s of polling and a failed scp, and `ipcluster start` removes the
    files of its engines as soon as they end (measured: 3 such engines added 46 s to a
    restart). The output of engines ended on purpose is not needed."""
    for set_id in set_ids:
        for launcher in getattr(cluster.engines.get(set_id), "launchers", {}).values():
            if isinstance(launcher, SSHLauncher) and launcher._output is None:
                launcher._output = ""


def kill_running(cluster: ipp.Cluster) -> None:
    """SIGKILL every engine process of this host that the launcher's sets still run."""
    for engine_set in list(cluster.engines.values()):
        for launcher in list(getattr(engine_set, "launchers", {}).values()):
            pid = getattr(launcher, "pid", None)
            if pid and getattr(launcher, "process", None) is not None \
                    and not process_ended(launcher):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
