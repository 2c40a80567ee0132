"""Going on with fewer workers when a host is lost (`--min-workers K`).

A host that cannot be reached cannot get new engines, so a restart of the same size
cannot be placed. With a floor of K workers set, a cell that lost a host restarts on the
hosts left, as many workers as they held (at least K), with the state given back as
after any restart; `--max-restarts` then runs the cell again, its fit resuming from the
last BackupAndRestore backup. `%tfdist resize -n N` grows the cluster back once the
host can be reached.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ...protocol.tfconfig import EngineReport


def survivors(workers: Sequence[EngineReport], lost_hosts: Sequence[str]) -> list[EngineReport]:
    """The workers whose hosts were not lost."""
    lost = set(lost_hosts)
    return [worker for worker in workers if worker.host not in lost]


def unreachable_names(workers: Sequence[EngineReport], lost_hosts: Sequence[str]) -> set[str]:
    """Every name a lost host goes by here: its host name and the addresses its workers
    advertised (a launcher may know it by either)."""
    lost = set(lost_hosts)
    return lost | {worker.address for worker in workers if worker.host in lost}


def placement(workers: Sequence[EngineReport]) -> dict[str, int]:
    """{host: workers on it}: where a launcher that places engines by host puts them."""
    return dict(Counter(worker.host for worker in workers))


def floor_problem(min_workers: int | None, workers: int) -> str | None:
    """Why `min_workers` cannot be the floor of a cluster of `workers`, or None."""
    if min_workers is None:
        return None
    if isinstance(min_workers, bool) or not isinstance(min_workers, int) or min_workers < 1:
        return (f"--min-workers must be a whole number of workers >= 1, got {min_workers!r}; "
                "nothing was started")
    if min_workers > workers:
        return (f"--min-workers {min_workers} is above the cluster's {workers} workers: give "
                f"at most {workers} (the workers it may go on with when a host is lost)")
    return None
