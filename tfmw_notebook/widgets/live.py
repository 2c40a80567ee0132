"""The dashboard of one %%tfdist cell: shown when the first event arrives,
a static image and a summary line when the cell ends."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..protocol.events import EventReader
from .metrics import MetricsStore

if TYPE_CHECKING:
    from .dashboard import Dashboard, TextReporter

_REFRESH_EVERY = 0.5  # seconds between progress updates when no event arrives
# Events are taken in at once; the view shows them at most this often. Each refresh
# updates every worker's row: once per arriving publish, it cost the notebook 10-20% of a
# core at any number of workers (measured), a core the workers need on a small machine.
_SHOW_EVERY = 0.25


class LiveRun:
    def __init__(self, *, widgets: bool, host_of: Callable[[int], str] | None = None):
        self.store = MetricsStore()
        self._widgets = widgets
        self._host_of = host_of   # each worker's host, for the dashboard's summary by host
        self._view: Dashboard | TextReporter | None = None
        self._handle = None
        self._readers: dict[int, EventReader] = {}
        self._sources: dict[int, dict] = {}
        self._last_refresh = -float("inf")
        self._unshown = False      # events taken in that the view does not show yet

    def on_data(self, rank: int, data: dict) -> None:
        """Called with each rank's published data while the cell runs."""
        if self._sources.get(rank) is not data:
            # A new attempt after a restart: a fresh worker numbers its events from 1.
            self._sources[rank] = data
            self._readers[rank] = EventReader()
        events = self._readers[rank].read(data)
        if events:
            self._ensure_view().take(events)
            self._unshown = True
        if self._view is None:
            return
        since = time.monotonic() - self._last_refresh
        # A throttled redraw catches up once events stop, hence a refresh now and then.
        if (self._unshown and since >= _SHOW_EVERY) or since > _REFRESH_EVERY:
            self._view.refresh()
            self._last_refresh = time.monotonic()
            self._unshown = False

    def on_stall(self, rank: int, seconds: float, where: str) -> None:
        """A worker stuck in its own code: its progress row says so until it moves."""
        if rank in self.store.ranks:
            self.store.progress(rank).stalled = f"no progress for {seconds:.0f} s, at {where}"
            if self._view is not None:
                self._view.refresh()

    def finish(self) -> None:
        """Leave the curves as a PNG (no widget state needed to see them) and a summary."""
        if self._view is None:
            return
        if self._widgets and self._handle is not None:
            from IPython.display import Image, Markdown

            from .figures import shown_width

            if self.store.metric_names():
                png = self._view.final_png()
                self._handle.update(Image(data=png, format="png", width=shown_width(png)))
            else:  # evaluate() only: nothing to draw, the summary line says it all
                self._handle.update(Markdown(""))
            self._view.close()
        else:
            self._view.refresh(force=True)
        summary = self._view.summary_line()
        if summary:   # nothing to sum up when the cell failed before an epoch ended
            print(summary)

    def _ensure_view(self):
        if self._view is None:
            if self._widgets:
                from IPython.display import display

                from .dashboard import Dashboard

                self._view = Dashboard(self.store, host_of=self._host_of)
                # None when no front end listens (a script): the view still collects.
                self._handle = display(self._view.widget, display_id=True)
            else:
                from .dashboard import TextReporter

                self._view = TextReporter(self.store)
        return self._view
