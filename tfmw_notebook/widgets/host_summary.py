"""Many workers' progress in a few lines: one per host, and the straggler named.

Pure: reads WorkerProgress values. The dashboard shows these lines instead of one row
per worker once a run has more than SUMMARISE_ABOVE workers (a row each would push the
curves out of sight at 16 and more).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from .summaries import format_duration
from .worker_runs import WorkerProgress

SUMMARISE_ABOVE = 8


@dataclass(frozen=True)
class HostGroup:
    """The workers of one host, as one line."""

    host: str
    ranks: tuple[int, ...]
    fraction: float | None        # the share done by the host's least advanced worker
    slowest: int                  # the worker that will finish last (largest ETA)
    eta_seconds: float | None     # that worker's ETA
    rates: tuple[float, float] | None   # (lowest, highest) steps/s among them
    behind: tuple[int, ...]       # ranks the store says lag the others
    stalled: tuple[int, ...]      # ranks the stall watch flagged
    finished: bool                # every worker of the host is done


def finishes_last(progress: Sequence[WorkerProgress]) -> WorkerProgress:
    """The worker whose run ends last: the largest ETA; without ETAs, the least advanced."""
    unfinished = [p for p in progress if not p.finished] or list(progress)

    def lateness(p: WorkerProgress) -> tuple:
        # A stalled worker is later than any ETA; then the ETA; then the least progress.
        return (p.stalled is not None, p.eta_seconds if p.eta_seconds is not None else -1.0,
                -(p.position if p.position is not None else -1.0), p.rank)

    return max(unfinished, key=lateness)


def group_by_host(progress: Mapping[int, WorkerProgress], host_of: Callable[[int], str],
                  behind: Collection[int] = ()) -> list[HostGroup]:
    """One HostGroup per host, hosts in the order of their lowest rank."""
    by_host: dict[str, list[WorkerProgress]] = {}
    for rank in sorted(progress):
        by_host.setdefault(host_of(rank), []).append(progress[rank])
    groups = []
    for host, members in by_host.items():
        last = finishes_last(members)
        fractions = [p.fraction for p in members]
        rates = [p.steps_per_second for p in members
                 if p.steps_per_second and not p.finished]
        groups.append(HostGroup(
            host=host, ranks=tuple(p.rank for p in members),
            fraction=None if None in fractions else min(f for f in fractions if f is not None),
            slowest=last.rank, eta_seconds=None if last.finished else last.eta_seconds,
            rates=(min(rates), max(rates)) if rates else None,
            behind=tuple(p.rank for p in members if p.rank in behind),
            stalled=tuple(p.rank for p in members if p.stalled is not None),
            finished=all(p.finished for p in members)))
    return groups


def ranks_text(ranks: Sequence[int]) -> str:
    """'workers 0-3', 'workers 0, 2, 5', 'worker 4'."""
    if len(ranks) == 1:
        return f"worker {ranks[0]}"
    if list(ranks) == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"workers {ranks[0]}-{ranks[-1]}"
    return "workers " + ", ".join(str(rank) for rank in ranks)


def _rates_text(rates: tuple[float, float] | None) -> str:
    if rates is None:
        return ""
    low, high = rates
    return f"{low:.1f} steps/s" if f"{low:.1f}" == f"{high:.1f}" else \
        f"{low:.1f}-{high:.1f} steps/s"


def group_text(group: HostGroup) -> str:
    """'node3 · workers 4-7 · 11.8-13.1 steps/s · last: worker 6, ETA 9 s (behind)'"""
    parts = [group.host, ranks_text(group.ranks)]
    if group.finished:
        return " · ".join(parts + ["done"])
    if group.stalled:
        parts.append(f"{ranks_text(group.stalled)} making no progress")
    rates = _rates_text(group.rates)
    if rates:
        parts.append(rates)
    last = f"last: worker {group.slowest}"
    if group.eta_seconds is not None and group.slowest not in group.stalled:
        last += f", ETA {format_duration(group.eta_seconds)}"
    if group.slowest in group.behind:
        last += " (behind)"
    if len(group.ranks) > 1 or group.eta_seconds is not None:
        parts.append(last)
    return " · ".join(parts)


def overview_text(progress: Mapping[int, WorkerProgress], groups: Sequence[HostGroup]) -> str:
    """'16 workers on 8 hosts · 10.9-13.4 steps/s · straggler: worker 11 on node6
    (10.9 steps/s), ETA 12 s'"""
    workers = len(progress)
    parts = [f"{workers} worker{'s' if workers != 1 else ''} on {len(groups)} "
             f"host{'s' if len(groups) != 1 else ''}"]
    if progress and all(p.finished for p in progress.values()):
        return " · ".join(parts + ["done"])
    rates = [p.steps_per_second for p in progress.values()
             if p.steps_per_second and not p.finished]
    if rates:
        parts.append(_rates_text((min(rates), max(rates))))
    if progress:
        last = finishes_last(list(progress.values()))
        host = next(g.host for g in groups if last.rank in g.ranks)
        straggler = f"straggler: worker {last.rank} on {host}"
        if last.stalled:
            straggler += f" ({last.stalled})"
        elif last.steps_per_second:
            straggler += f" ({last.steps_per_second:.1f} steps/s)"
        if last.eta_seconds is not None and not last.stalled:
            straggler += f", ETA {format_duration(last.eta_seconds)}"
        parts.append(straggler)
    return " · ".join(parts)
