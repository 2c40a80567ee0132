"""The dashboard's summary of many workers: one line per host, the straggler named, each
worker's row under its host (pure, and the widget with a recording comm)."""

import pytest
from tfmw_notebook.widgets import Dashboard
from tfmw_notebook.widgets.host_summary import (
    SUMMARISE_ABOVE,
    finishes_last,
    group_by_host,
    group_text,
    overview_text,
    ranks_text,
)
from tfmw_notebook.widgets.metrics import MetricsStore
from tfmw_notebook.widgets.worker_runs import WorkerProgress

from fake_comm import recording_comms  # noqa: F401 (an autouse fixture)
from test_dashboard import FakeClock, batch, begin

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

EIGHT_HOSTS = {rank: f"node{rank // 2 + 1}" for rank in range(16)}


def progress(rank, rate=10.0, eta=5.0, position=0.5, **fields):
    return WorkerProgress(rank=rank, epochs=2, steps=20, position=position,
                          steps_per_second=rate, eta_seconds=eta, **fields)


def test_ranks_are_written_as_a_range_when_they_are_one():
    assert ranks_text([4]) == "worker 4"
    assert ranks_text([4, 5, 6, 7]) == "workers 4-7"
    assert ranks_text([0, 2, 5]) == "workers 0, 2, 5"


def test_the_worker_that_finishes_last_has_the_largest_eta_or_is_stalled():
    workers = [progress(0, eta=4.0), progress(1, eta=9.0), progress(2, eta=6.0)]
    assert finishes_last(workers).rank == 1
    workers.append(progress(3, eta=1.0, stalled="no progress for 12 s, at on_batch_end"))
    assert finishes_last(workers).rank == 3
    # No ETA yet: the least advanced.
    assert finishes_last([progress(0, eta=None, position=0.3),
                          progress(1, eta=None, position=0.1)]).rank == 1
    # A finished worker is not the one others wait for.
    assert finishes_last([progress(0, eta=None, finished=True), progress(1, eta=2.0)]).rank == 1


def test_sixteen_workers_on_eight_hosts_are_eight_lines():
    workers = {rank: progress(rank, rate=12.0 + rank / 10, eta=8.0, position=1.0)
               for rank in range(16)}
    workers[11] = progress(11, rate=9.5, eta=11.0, position=0.8)
    groups = group_by_host(workers, EIGHT_HOSTS.__getitem__, behind={11})
    assert [g.host for g in groups] == [f"node{i}" for i in range(1, 9)]
    sixth = groups[5]
    assert sixth.ranks == (10, 11) and sixth.slowest == 11 and sixth.behind == (11,)
    assert sixth.fraction == pytest.approx(0.4) and sixth.rates == (9.5, 13.0)
    assert group_text(sixth) == ("node6 · workers 10-11 · 9.5-13.0 steps/s · "
                                 "last: worker 11, ETA 11 s (behind)")
    assert overview_text(workers, groups) == (
        "16 workers on 8 hosts · 9.5-13.5 steps/s · "
        "straggler: worker 11 on node6 (9.5 steps/s), ETA 11 s")


def test_a_stalled_worker_is_named_on_its_host_and_as_the_straggler():
    workers = {rank: progress(rank) for rank in range(4)}
    workers[2] = progress(2, stalled="no progress for 12 s, at on_train_batch_end")
    groups = group_by_host(workers, lambda rank: "node1" if rank < 2 else "node2")
    assert group_text(groups[1]) == ("node2 · workers 2-3 · worker 2 making no progress · "
                                     "10.0 steps/s · last: worker 2")
    assert overview_text(workers, groups).endswith(
        "straggler: worker 2 on node2 (no progress for 12 s, at on_train_batch_end)")


def test_finished_hosts_and_runs_say_done():
    workers = {rank: progress(rank, finished=True, eta=None) for rank in range(4)}
    groups = group_by_host(workers, lambda rank: "node1")
    assert group_text(groups[0]) == "node1 · workers 0-3 · done"
    assert groups[0].fraction == 1.0
    assert overview_text(workers, groups) == "4 workers on 1 host · done"


def fed_dashboard(workers, host_of, clock=None):
    dashboard = Dashboard(MetricsStore(), clock=clock or FakeClock(), host_of=host_of)
    dashboard.feed([begin(rank, epochs=4, steps=70) for rank in range(workers)])
    dashboard.feed([batch(rank, step, epoch=1, t=10 + step / 10)
                    for rank in range(workers) for step in range(35 if rank != 11 else 20)])
    return dashboard


def test_above_eight_workers_the_dashboard_shows_a_line_per_host():
    dashboard = fed_dashboard(16, EIGHT_HOSTS.__getitem__)
    overview, *hosts = dashboard.progress_box.children
    assert len(hosts) == 8
    assert overview.value.startswith("16 workers on 8 hosts · 10.0 steps/s · "
                                     "straggler: worker 11 on node6")
    (bar, label), details = hosts[5].children[0].children, hosts[5].children[1]
    assert label.value.startswith("node6 · workers 10-11 · 10.0 steps/s · last: worker 11, ETA")
    assert label.value.endswith("(behind)") and bar.bar_style == "warning"
    assert bar.value == pytest.approx((1 + 20 / 70) / 4)
    # Each worker's row is there under the host's accordion, closed until opened.
    assert details.selected_index is None
    rows = details.children[0].children
    assert [row.children[1].value.split(":")[0] for row in rows] == ["worker 10", "worker 11"]


def test_each_workers_row_under_a_host_is_updated_at_most_every_detail_interval():
    clock = FakeClock()
    dashboard = fed_dashboard(16, EIGHT_HOSTS.__getitem__, clock)
    host_label = dashboard.progress_box.children[1].children[0].children[1]
    row_label = dashboard.progress_box.children[1].children[1].children[0].children[0].children[1]
    before = len(row_label.comm.updates("value"))
    dashboard.feed([batch(0, 35, epoch=1, t=13.6)])
    assert len(row_label.comm.updates("value")) == before      # within the interval
    assert "step 36/70" not in row_label.value
    assert host_label.comm.updates("value")                     # the host's line moves
    clock.now += 1.0
    dashboard.feed([batch(0, 36, epoch=1, t=13.7)])
    assert row_label.value.startswith("worker 0: epoch 2/4 step 37/70")


def test_up_to_eight_workers_or_without_hosts_each_worker_has_a_row():
    assert SUMMARISE_ABOVE == 8
    assert len(fed_dashboard(8, EIGHT_HOSTS.__getitem__).progress_box.children) == 8
    assert len(fed_dashboard(16, None).progress_box.children) == 16


def test_a_finished_cell_leaves_none_of_the_host_lines_open(monkeypatch):
    from ipywidgets.widgets import widget as widget_module
    from tfmw_notebook.widgets import live

    class Handle:
        def update(self, obj):
            pass

    monkeypatch.setattr("IPython.display.display", lambda *a, **k: Handle())
    before = set(widget_module._instances)
    run = live.LiveRun(widgets=True, host_of=EIGHT_HOSTS.__getitem__)
    for rank in range(16):
        run.on_data(rank, {"tfmw-events-1": [begin(rank), batch(rank, 0)]})
    run._view.refresh()     # what came in quicker than the view's refreshes, shown
    assert len(run._view.progress_box.children) == 9      # the overview and 8 hosts
    run.finish()
    assert set(widget_module._instances) - before == set()
