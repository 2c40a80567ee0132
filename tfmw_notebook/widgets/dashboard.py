"""Live training dashboard: loss curves, per-worker progress, latest values.

Renders a `MetricsStore`. The curves are drawn with matplotlib's Agg backend into a
PNG shown in an `ipywidgets.Image`, so no ipympl or front-end extension is needed,
and the image is redrawn within a small share of the kernel's time (DRAW_SHARE).
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Iterable, Mapping

import ipywidgets as widgets

from .curves import render_curves_png
from .figures import (
    close_widget_tree,
    import_matplotlib,
    placeholder,
    sharp_image,
    show_figure,
)
from .host_summary import SUMMARISE_ABOVE, HostGroup, group_by_host, group_text, overview_text
from .metrics import MetricsStore, WorkerProgress
from .summaries import format_metrics, format_value, progress_text, summary_text

# Drawing takes the kernel's CPU, which the workers need when they fill the machine's
# cores (measured on 2 cores: each ms of drawing during a fit made the fit about a ms
# longer). So live drawings take at most DRAW_SHARE of the time since the dashboard
# appeared: a drawing is due when the time drawn so far plus the next drawing's expected
# cost fits in that share (time not drawn is saved for one drawing at most). The expected
# cost is the kernel's last drawing (FIRST_DRAWING_GUESS before any). The first picture
# comes FIRST_PICTURE_AFTER seconds in at the latest (a fit of 5 s, the quickstart's on a
# fast machine, showed none until it ended), so a fit shorter than that is drawn only when
# it ends; after a first step that traces for several seconds the curves appear with the
# first point; a long fit is redrawn as often as the share allows, and at least every
# MAX_REDRAW_INTERVAL seconds (the picture must be seen to move).
DRAW_SHARE = 0.02
FIRST_DRAWING_GUESS = 0.09    # seconds; one drawing measured 85-110 ms on 2 cores
FIRST_PICTURE_AFTER = 2.0
MAX_REDRAW_INTERVAL = 5.0
DETAIL_INTERVAL = 1.0   # seconds between updates of each worker's row under a host's line


class _DrawingCost:
    """What the kernel's last drawing took: the next dashboard's first estimate."""

    def __init__(self) -> None:
        self.last: float | None = None

    def expected(self) -> float:
        return FIRST_DRAWING_GUESS if self.last is None else self.last

    def remember(self, seconds: float) -> None:
        self.last = seconds


_drawing_cost = _DrawingCost()


class _ProgressRow:
    def __init__(self) -> None:
        self.bar = widgets.FloatProgress(value=0.0, min=0.0, max=1.0,
                                         layout=widgets.Layout(width="30%", min_width="80px"))
        # HTML, not Label: a label is cut off in a narrow window, this wraps.
        self.label = widgets.HTML()
        self.widget = widgets.HBox([self.bar, self.label])
        self.widget.add_class("tfmw-worker-progress")   # CSS classes: for styling and tests

    def show(self, progress: WorkerProgress, behind: bool) -> None:
        fraction = progress.fraction
        if fraction is None and progress.steps and progress.position is not None:
            fraction = progress.step / progress.steps      # length unknown: this epoch only
        self.bar.value = fraction or 0.0
        self.bar.bar_style = "warning" if behind else ("success" if progress.finished else "info")
        self.label.value = html.escape(progress_text(progress, behind))


class _HostRow:
    """One host's workers as one line, each worker's own row under an accordion: opening
    it is the front end's business, so it opens while the cell runs (the kernel, busy
    with the cell, reads no widget messages until it ends)."""

    def __init__(self) -> None:
        self.bar = widgets.FloatProgress(value=0.0, min=0.0, max=1.0,
                                         layout=widgets.Layout(width="30%", min_width="80px"))
        self.label = widgets.HTML()
        self.workers_box = widgets.VBox()
        self.details = widgets.Accordion(children=[self.workers_box], titles=("each worker",),
                                         selected_index=None)
        self.details.add_class("tfmw-host-details")
        self.widget = widgets.VBox([widgets.HBox([self.bar, self.label]), self.details])
        self.widget.add_class("tfmw-host-progress")

    def show(self, group: HostGroup) -> None:
        self.bar.value = group.fraction or 0.0
        self.bar.bar_style = ("warning" if group.stalled or group.slowest in group.behind
                              else "success" if group.finished else "info")
        self.label.value = html.escape(group_text(group))


class Dashboard:
    """The live view of a training run: `widget` to display, `feed(events)` to update.

    `host_of(rank)` names each worker's host: with more than SUMMARISE_ABOVE workers the
    progress is one line per host under an overview naming the straggler, each host's
    workers shown on demand; without it (or with fewer workers), one row per worker.
    """

    def __init__(self, store: MetricsStore | None = None, min_redraw_interval: float = 0.5,
                 clock: Callable[[], float] = time.monotonic,
                 host_of: Callable[[int], str] | None = None):
        self.store = store if store is not None else MetricsStore()
        self.min_redraw_interval = min_redraw_interval
        self._clock = clock
        self._started = clock()
        self._last_redraw = -float("inf")
        self._drawing_seconds = 0.0      # spent on live drawings so far
        self._expected_cost = _drawing_cost.expected()
        self._stale = True              # the image does not show everything in the store yet
        self.redraws = 0
        self.image = sharp_image()
        self.waiting = placeholder()    # until the first drawing
        self.progress_box = widgets.VBox()
        self.latest_html = widgets.HTML()
        self.widget = widgets.VBox([self.image, self.waiting, self.progress_box,
                                    self.latest_html])
        self.widget.add_class("tfmw-dashboard")
        self.image.add_class("tfmw-curves")
        self._rows: dict[int, _ProgressRow] = {}
        self._host_of = host_of
        self.overview = widgets.HTML()
        self.overview.add_class("tfmw-progress-overview")
        self._host_rows: dict[str, _HostRow] = {}
        self._details_shown = -float("inf")

    def feed(self, events: Mapping | Iterable[Mapping]) -> None:
        """Add events to the store and update the view (the image only if it is due)."""
        self.take(events)
        self.refresh()

    def take(self, events: Mapping | Iterable[Mapping]) -> None:
        """Add events to the store; the view shows them at the next `refresh`."""
        self.store.feed(events)
        self._stale = True

    def refresh(self, force: bool = False) -> None:
        """Update progress and latest values; redraw the curves if due (or `force`)."""
        self._show_progress()
        self._show_latest()
        if force or (self._stale and self._drawing_due()):
            self._redraw()

    def _drawing_due(self) -> bool:
        if not self.store.metric_names():
            return False     # no curve yet: the progress rows say "starting"
        now = self._clock()
        since_last = now - max(self._last_redraw, self._started)
        if since_last >= (MAX_REDRAW_INTERVAL if self.redraws else FIRST_PICTURE_AFTER):
            return True
        within_share = (self._drawing_seconds + self._expected_cost
                        <= DRAW_SHARE * (now - self._started))
        return since_last >= self.min_redraw_interval and within_share

    def final_png(self) -> bytes:
        """The curves as they stand, for the static image left in the cell."""
        began = self._clock()
        png = render_curves_png(self.store)
        _drawing_cost.remember(self._clock() - began)
        return png

    def close(self) -> None:
        """Close every widget of the view (the static image has replaced it), also those
        not shown (the overview below SUMMARISE_ABOVE workers, rows made before)."""
        close_widget_tree(self.widget)
        for widget in [self.overview, *(row.widget for row in self._rows.values())]:
            close_widget_tree(widget)

    def summary_line(self) -> str:
        return summary_text(self.store.summary())

    def _redraw(self) -> None:
        import_matplotlib()     # the kernel's first drawing imports it: not a drawing's cost
        began = self._clock()
        # Time not drawn is saved for one drawing, not more: after a long wait for the
        # first point the next drawings do not come twice a second.
        self._drawing_seconds = max(self._drawing_seconds,
                                    DRAW_SHARE * (began - self._started) - self._expected_cost)
        show_figure(self.image, render_curves_png(self.store), self.waiting)
        self._last_redraw = self._clock()
        self._expected_cost = self._last_redraw - began
        _drawing_cost.remember(self._expected_cost)
        self._drawing_seconds += self._expected_cost
        self._stale = False
        self.redraws += 1

    def _show_progress(self) -> None:
        behind = set(self.store.lagging_ranks())
        ranks = self.store.ranks
        if self._host_of is not None and len(ranks) > SUMMARISE_ABOVE:
            self._show_hosts(ranks, behind)
            return
        for rank in ranks:
            if rank not in self._rows:
                self._rows[rank] = _ProgressRow()
                self.progress_box.children = [self._rows[r].widget for r in sorted(self._rows)]
            self._rows[rank].show(self.store.progress(rank), rank in behind)

    def _show_hosts(self, ranks: list[int], behind: set[int]) -> None:
        assert self._host_of is not None
        progress = {rank: self.store.progress(rank) for rank in ranks}
        groups = group_by_host(progress, self._host_of, behind)
        self.overview.value = html.escape(overview_text(progress, groups))
        if [g.host for g in groups] != list(self._host_rows):
            self._host_rows = {g.host: self._host_rows.get(g.host) or _HostRow() for g in groups}
            self.progress_box.children = [self.overview] + [
                row.widget for row in self._host_rows.values()]
        # Each worker's row is kept up to date (the kernel cannot know which are open), at
        # most every DETAIL_INTERVAL: a message per worker per refresh adds up at scale.
        now = self._clock()
        details_due = now - self._details_shown >= DETAIL_INTERVAL
        for group in groups:
            row = self._host_rows[group.host]
            row.show(group)
            if not details_due and row.workers_box.children:
                continue
            for rank in group.ranks:
                if rank not in self._rows:
                    self._rows[rank] = _ProgressRow()
                self._rows[rank].show(progress[rank], rank in behind)
            shown = [self._rows[rank].widget for rank in group.ranks]
            if list(row.workers_box.children) != shown:
                row.workers_box.children = shown
        if details_due:
            self._details_shown = now

    def _show_latest(self) -> None:
        latest = self.store.latest()
        self.latest_html.value = " &nbsp;·&nbsp; ".join(
            f"<b>{html.escape(name)}</b> {format_value(value)}" for name, value in latest.items())


class TextReporter:
    """Fallback for a terminal: one line per finished epoch per worker, none per batch."""

    def __init__(self, store: MetricsStore | None = None, write: Callable[[str], object] = print):
        self.store = store if store is not None else MetricsStore()
        self._write = write
        self._epochs_written: dict[int, int] = {}
        self._evaluation_runs_written: dict[int, int] = {}

    def feed(self, events: Mapping | Iterable[Mapping]) -> None:
        self.store.feed(events)
        self.refresh()

    # Its lines cost nothing to keep current, and keep their place among the workers' output.
    take = feed

    def refresh(self, force: bool = False) -> None:
        for rank in self.store.ranks:
            progress = self.store.progress(rank)
            records = self.store.epoch_logs(rank)
            for record in records[self._epochs_written.get(rank, 0):]:
                total = f"/{progress.epochs}" if progress.epochs else ""
                self._write(f"worker {rank} · epoch {record['epoch'] + 1}{total} · "
                            f"{format_metrics(record['logs'])}")
            self._epochs_written[rank] = len(records)
            evaluated = progress.mode == "evaluate" and progress.finished
            if evaluated and self._evaluation_runs_written.get(rank) != progress.run:
                self._write(f"worker {rank} · evaluate · "
                            f"{format_metrics(self.store.evaluation(rank) or {})}")
                self._evaluation_runs_written[rank] = progress.run

    def summary_line(self) -> str:
        return summary_text(self.store.summary())
