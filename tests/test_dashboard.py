"""The dashboard widget without a kernel: a recording comm stands in for the front end."""

import math

import ipywidgets
import pytest
from tfmw_notebook.widgets import Dashboard, TextReporter
from tfmw_notebook.widgets.metrics import MetricsStore
from tfmw_notebook.widgets.summaries import format_duration, progress_text

from fake_comm import PNG_SIGNATURE, RecordingComm, recording_comms  # noqa: F401 (fixture)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture(autouse=True)
def no_drawing_before():
    """Each test's kernel has drawn nothing yet: its first drawing's cost is the guess."""
    from tfmw_notebook.widgets import dashboard as module

    module._drawing_cost.last = None
    yield
    module._drawing_cost.last = None


def drawn_before(seconds: float) -> None:
    """The kernel's last drawing took `seconds`: the next dashboard expects as much."""
    from tfmw_notebook.widgets import dashboard as module

    module._drawing_cost.remember(seconds)


def begin(rank, epochs=2, steps=20):
    return {"kind": "train_begin", "rank": rank, "time": 0.0, "epochs": epochs, "steps": steps,
            "mode": "fit"}


def batch(rank, step, epoch=0, loss=1.0, t=None):
    return {"kind": "batch", "rank": rank, "time": t if t is not None else 0.1 * (step + 1),
            "epoch": epoch, "step": step, "logs": {"loss": loss, "accuracy": 1 - loss}}


def image_updates(dashboard):
    return dashboard.image.comm.updates("value")


def test_widget_tree_is_built_from_real_widgets():
    dashboard = Dashboard(MetricsStore())
    assert isinstance(dashboard.widget, ipywidgets.VBox)
    assert isinstance(dashboard.image, ipywidgets.Image) and dashboard.image.format == "png"
    assert dashboard.widget.children[0] is dashboard.image
    assert isinstance(dashboard.image.comm, RecordingComm)


def feed_over(dashboard, clock, seconds, every=0.1, first_step=0):
    """Batches every `every` seconds for `seconds` (as a worker's reporting does)."""
    steps = int(round(seconds / every))
    for step in range(first_step, first_step + steps):
        clock.now += every
        dashboard.feed([batch(0, step, loss=1 / (step + 1))])
    return first_step + steps


def test_a_fit_gets_its_first_picture_after_two_seconds():
    """Points from the start (a warm fit): no picture for FIRST_PICTURE_AFTER (2 s), then
    one, though a drawing's expected cost (90 ms) is DRAW_SHARE of the time since the
    dashboard appeared only at 4.5 s: a 5 s fit is seen to move."""
    from tfmw_notebook.widgets.dashboard import (
        DRAW_SHARE,
        FIRST_DRAWING_GUESS,
        FIRST_PICTURE_AFTER,
    )

    clock = FakeClock()
    dashboard = Dashboard(MetricsStore(), clock=clock)
    dashboard.feed(begin(0, steps=100))
    first_due = FIRST_PICTURE_AFTER
    assert first_due < FIRST_DRAWING_GUESS / DRAW_SHARE
    step = feed_over(dashboard, clock, first_due - 0.1)
    assert image_updates(dashboard) == []
    feed_over(dashboard, clock, 0.2, first_step=step)
    sent = image_updates(dashboard)
    assert len(sent) == 1 and sent[0].startswith(PNG_SIGNATURE)
    assert dashboard.image.value == sent[0]


def test_the_next_dashboard_expects_what_the_kernels_last_drawing_took(monkeypatch):
    """A cell's final picture took 30 ms (a fast machine): the next cell's fit is first
    drawn once 30 ms is DRAW_SHARE of its time (1.5 s), not after the guess's 4.5 s."""
    from tfmw_notebook.widgets.dashboard import DRAW_SHARE, FIRST_DRAWING_GUESS

    clock = FakeClock()
    drawing_takes(monkeypatch, clock, 0.03)
    earlier = Dashboard(MetricsStore(), clock=clock)
    earlier.feed([begin(0, steps=100), batch(0, 0, loss=1.0)])
    earlier.final_png()
    dashboard = Dashboard(MetricsStore(), clock=clock)
    dashboard.feed(begin(0, steps=1000))
    step = feed_over(dashboard, clock, 0.03 / DRAW_SHARE - 0.2)
    assert image_updates(dashboard) == []
    feed_over(dashboard, clock, 0.3, first_step=step)
    assert len(image_updates(dashboard)) == 1
    assert 0.03 / DRAW_SHARE + 0.1 < FIRST_DRAWING_GUESS / DRAW_SHARE


def drawing_takes(monkeypatch, clock, seconds: float) -> None:
    """Each drawing of the curves advances `clock` by `seconds`."""
    from tfmw_notebook.widgets import dashboard as module

    real_render = module.render_curves_png

    def render(store):
        clock.now += seconds
        return real_render(store)

    monkeypatch.setattr(module, "render_curves_png", render)


def test_after_a_slow_first_step_the_first_point_is_drawn_at_once(monkeypatch):
    """Tracing took 3 s (no curve, nothing drawn): the first point is drawn when it
    comes, and the time saved while waiting pays for that drawing, not for a burst."""
    clock = FakeClock()
    drawn_before(0.025)
    drawing_takes(monkeypatch, clock, 0.025)
    dashboard = Dashboard(MetricsStore(), clock=clock)
    dashboard.feed(begin(0, steps=100))
    clock.now += 3.0
    dashboard.refresh()
    assert image_updates(dashboard) == []
    clock.now += 0.1
    dashboard.feed([batch(0, 0, loss=1.0)])
    assert len(image_updates(dashboard)) == 1
    feed_over(dashboard, clock, 1.0, first_step=1)
    assert len(image_updates(dashboard)) == 1      # not twice a second on saved time
    feed_over(dashboard, clock, 0.5, first_step=11)
    assert len(image_updates(dashboard)) == 2      # 1.25 s after: within the share again


def test_live_drawing_takes_at_most_its_share_of_the_time(monkeypatch):
    """Over a long fit the drawings' total stays within DRAW_SHARE of the time, however
    often events arrive, and the picture keeps moving."""
    from tfmw_notebook.widgets.dashboard import DRAW_SHARE, MAX_REDRAW_INTERVAL

    clock = FakeClock()
    drawing_takes(monkeypatch, clock, 0.030)
    dashboard = Dashboard(MetricsStore(), clock=clock)
    dashboard.feed(begin(0, steps=1000))
    feed_over(dashboard, clock, 30.0, every=0.05)
    drawn = len(image_updates(dashboard))
    assert drawn * 0.030 <= DRAW_SHARE * 30.0 + 0.030
    assert drawn >= 30.0 / MAX_REDRAW_INTERVAL - 1


def test_a_slow_drawing_still_moves_every_max_interval(monkeypatch):
    """A drawing far over the share (1 s): the curves are still redrawn every
    MAX_REDRAW_INTERVAL seconds after the last drawing ended."""
    from tfmw_notebook.widgets.dashboard import (
        DRAW_SHARE,
        FIRST_DRAWING_GUESS,
        MAX_REDRAW_INTERVAL,
    )

    clock = FakeClock()
    dashboard = Dashboard(MetricsStore(), clock=clock)
    dashboard.feed([begin(0, steps=100), batch(0, 0, loss=1.0)])
    drawing_takes(monkeypatch, clock, 1.0)
    clock.now += FIRST_DRAWING_GUESS / DRAW_SHARE + 0.1
    dashboard.feed([batch(0, 1, loss=0.5)])
    assert len(image_updates(dashboard)) == 1       # the first: its cost was not known
    clock.now += MAX_REDRAW_INTERVAL - 0.5
    dashboard.feed([batch(0, 2, loss=0.4)])
    assert len(image_updates(dashboard)) == 1       # far over the share, and not 2 s yet
    clock.now += 0.5
    dashboard.feed([batch(0, 3, loss=0.3)])
    assert len(image_updates(dashboard)) == 2


def test_a_stale_image_is_drawn_when_forced():
    clock = FakeClock()
    dashboard = Dashboard(MetricsStore(), clock=clock)
    dashboard.feed([begin(0), batch(0, 0)])
    dashboard.feed([batch(0, 1, loss=0.5)])     # too soon: not drawn
    assert image_updates(dashboard) == []
    dashboard.refresh(force=True)
    assert len(image_updates(dashboard)) == 1
    dashboard.refresh()                         # nothing new and not forced: no redraw
    clock.now += 10.0
    dashboard.refresh()
    assert len(image_updates(dashboard)) == 1


def test_progress_rows_show_each_worker():
    dashboard = Dashboard(MetricsStore(), clock=FakeClock())
    dashboard.feed([begin(0, epochs=4, steps=70), begin(1, epochs=4, steps=70)])
    dashboard.feed([batch(r, s, epoch=1, t=10 + s / 10) for r in (0, 1) for s in range(35)])
    rows = dashboard.progress_box.children
    assert len(rows) == 2
    bar, label = rows[1].children
    assert bar.comm.updates("value")[-1] == pytest.approx((1 + 35 / 70) / 4)
    sent_label = label.comm.updates("value")[-1]
    assert sent_label.startswith("worker 1: epoch 2/4 step 35/70 · 10.0 steps/s · ETA ")
    assert "(behind)" not in sent_label


def test_a_lagging_worker_is_flagged():
    dashboard = Dashboard(MetricsStore(), clock=FakeClock())
    dashboard.feed([begin(0), begin(1)])
    dashboard.feed([batch(0, s) for s in range(10)] + [batch(1, s) for s in range(3)])
    bar0, label0 = dashboard.progress_box.children[0].children
    bar1, label1 = dashboard.progress_box.children[1].children
    assert bar1.comm.updates("bar_style")[-1] == "warning"
    assert label1.comm.updates("value")[-1].endswith("(behind)")
    assert "warning" not in bar0.comm.updates("bar_style")

    dashboard.feed([batch(1, s) for s in range(3, 10)])     # caught up
    assert bar1.comm.updates("bar_style")[-1] != "warning"
    assert not label1.comm.updates("value")[-1].endswith("(behind)")


def test_finished_workers_show_done():
    dashboard = Dashboard(MetricsStore(), clock=FakeClock())
    dashboard.feed([begin(0, epochs=1, steps=2), batch(0, 0), batch(0, 1),
                    {"kind": "epoch", "rank": 0, "time": 1.0, "epoch": 0, "logs": {"loss": 0.5}},
                    {"kind": "train_end", "rank": 0, "time": 1.0}])
    bar, label = dashboard.progress_box.children[0].children
    assert bar.comm.updates("bar_style")[-1] == "success"
    assert bar.value == 1.0
    assert label.value == "worker 0: epoch 1/1 step 2/2 · done"


def test_latest_values_are_shown():
    dashboard = Dashboard(MetricsStore(), clock=FakeClock())
    dashboard.feed([begin(0), batch(0, 0, loss=0.75),
                    {"kind": "epoch", "rank": 0, "time": 5.0, "epoch": 0,
                     "logs": {"loss": 0.5, "accuracy": 0.5, "val_loss": 0.625}}])
    sent = dashboard.latest_html.comm.updates("value")[-1]
    assert "<b>loss</b> 0.5" in sent and "<b>val_loss</b> 0.625" in sent


def test_final_png_and_summary_line():
    store = MetricsStore()
    dashboard = Dashboard(store, clock=FakeClock())
    dashboard.feed([begin(0, epochs=2, steps=2)]
                   + [batch(0, s, epoch=e, t=e + s) for e in (0, 1) for s in (0, 1)]
                   + [{"kind": "epoch", "rank": 0, "time": 1.5 + e, "epoch": e, "samples": 64,
                       "logs": {"loss": 0.5 / (e + 1), "val_loss": 0.6 / (e + 1)}} for e in (0, 1)]
                   + [{"kind": "train_end", "rank": 0, "time": 4.0}])
    png = dashboard.final_png()
    assert png.startswith(PNG_SIGNATURE) and len(png) > 1000
    assert dashboard.summary_line() == "2 epochs · 4.0 s · loss 0.25 · val_loss 0.3 · 32 samples/s"


def test_summary_line_tells_of_lost_and_ignored_events():
    fit = [begin(0, epochs=1, steps=1), batch(0, 0, t=1.0),
           {"kind": "epoch", "rank": 0, "time": 2.0, "epoch": 0, "logs": {"loss": 0.5}}]
    dashboard = Dashboard(MetricsStore(), clock=FakeClock())
    dashboard.feed(fit)
    assert dashboard.summary_line() == "1 epoch · 2.0 s · loss 0.5"
    dashboard.feed({"kind": "train_end", "rank": 0, "time": 2.0, "dropped": 3})
    assert dashboard.summary_line() == "1 epoch · 2.0 s · loss 0.5 · 3 events lost"
    dashboard.feed(["not an event"])
    assert dashboard.summary_line() == \
        "1 epoch · 2.0 s · loss 0.5 · 3 events lost · 1 event ignored"

    reporter = TextReporter(MetricsStore(), write=lambda line: None)
    reporter.feed(fit + ["not an event", {"kind": "epoch", "rank": 0}])
    assert reporter.summary_line() == "1 epoch · 2.0 s · loss 0.5 · 2 events ignored"


def test_summary_line_of_an_evaluate_only_run_with_lost_events():
    from tfmw_notebook.widgets.summaries import summary_text

    line = summary_text({"epochs": 0, "wall_time": 2.0, "final": {}, "workers": 1,
                         "evaluation": {"loss": 0.5}, "lost_events": 1})
    assert line == "evaluate · 2.0 s · loss 0.5 · 1 event lost"


def test_the_cell_summary_printed_at_the_end_counts_events_a_worker_could_not_send(capsys):
    from tfmw_notebook.widgets.live import LiveRun
    from tfmw_notebook.worker.liveness.reporting import EventPublisher

    data, attempts = {}, []

    def publish_once_down(message):       # ipyparallel merges each publish into one dict
        attempts.append(message)
        if len(attempts) == 2:
            raise RuntimeError("down")
        data.update(message)

    publisher = EventPublisher(publish_once_down, rank=0)
    publisher.emit("train_begin", epochs=1, steps=1, mode="fit")
    publisher.emit("epoch", epoch=0, logs={"loss": 0.5})              # lost
    publisher.emit("train_end")
    live = LiveRun(widgets=False)
    live.on_data(0, data)
    live.finish()
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith(" · 1 event lost")


def test_more_panels_make_a_wider_image():
    def png_width(png):
        return int.from_bytes(png[16:20], "big")

    one_panel, two_panels = MetricsStore(), MetricsStore()
    def epoch_with(**logs):
        return {"kind": "epoch", "rank": 0, "time": 1.0, "epoch": 0, "logs": logs}

    one_panel.feed(epoch_with(loss=1.0, val_loss=1.0))
    two_panels.feed(epoch_with(loss=1.0, mae=1.0))
    one_width = png_width(Dashboard(one_panel).final_png())
    assert png_width(Dashboard(two_panels).final_png()) > 1.5 * one_width


def test_custom_loop_reports_are_drawn():
    store = MetricsStore()
    empty_png = Dashboard(store).final_png()
    store.feed([{"kind": "report", "rank": 0, "time": float(s), "step": s, "epoch": None,
                 "metrics": {"loss": 1 / (s + 1)}} for s in range(5)])
    assert Dashboard(store).final_png() != empty_png
    assert progress_text(store.progress(0)) == "worker 0: step 4"


def test_text_reporter_writes_one_line_per_epoch_per_worker():
    lines = []
    reporter = TextReporter(MetricsStore(), write=lines.append)
    for rank in (0, 1):
        reporter.feed(begin(rank, epochs=2, steps=3))
    for epoch in (0, 1):
        for rank in (0, 1):
            reporter.feed([batch(rank, s, epoch=epoch) for s in range(3)])
            reporter.feed({"kind": "epoch", "rank": rank, "time": 1.0 + epoch, "epoch": epoch,
                           "logs": {"loss": 0.5 - 0.25 * epoch, "val_loss": 0.75}})
    assert lines == [
        "worker 0 · epoch 1/2 · loss 0.5 · val_loss 0.75",
        "worker 1 · epoch 1/2 · loss 0.5 · val_loss 0.75",
        "worker 0 · epoch 2/2 · loss 0.25 · val_loss 0.75",
        "worker 1 · epoch 2/2 · loss 0.25 · val_loss 0.75",
    ]
    reporter.feed([begin(0, epochs=1, steps=1) | {"mode": "evaluate"}, batch(0, 0),
                   {"kind": "train_end", "rank": 0, "time": 9.0, "logs": {"loss": 0.3}}])
    reporter.refresh()
    assert lines[-1] == "worker 0 · evaluate · loss 0.3" and len(lines) == 5


def test_format_duration():
    assert format_duration(6.04) == "6.0 s"
    assert format_duration(42.4) == "42 s"
    assert format_duration(125) == "2 min 5 s"
    assert format_duration(3 * 3600 + 120) == "3 h 2 min"


def test_summary_line_of_an_evaluate_only_run():
    from tfmw_notebook.widgets.summaries import summary_text

    line = summary_text({"epochs": 0, "wall_time": 2.0, "final": {}, "workers": 2,
                         "evaluation": {"loss": 0.5, "accuracy": 0.9}})
    assert line.startswith("evaluate · ") and "loss 0.5" in line and "accuracy 0.9" in line


def test_a_stalled_worker_row_says_so_until_its_next_event():
    from tfmw_notebook.widgets.live import LiveRun
    from tfmw_notebook.widgets.summaries import progress_text

    run = LiveRun(widgets=False)
    run.store.feed([{"kind": "train_begin", "rank": 1, "time": 1.0, "epochs": 2, "steps": 10},
                    {"kind": "batch", "rank": 1, "time": 2.0, "epoch": 0, "step": 4,
                     "logs": {"loss": 0.5}}])
    run.on_stall(1, 62.4, "<tfdist-cell-3>:5 in on_train_batch_end")
    text = progress_text(run.store.progress(1))
    assert text.endswith("· no progress for 62 s, at <tfdist-cell-3>:5 in on_train_batch_end")
    run.store.feed({"kind": "batch", "rank": 1, "time": 70.0, "epoch": 0, "step": 5, "logs": {}})
    assert "no progress" not in progress_text(run.store.progress(1))


def test_figures_are_drawn_at_twice_the_pixels_they_are_shown_at():
    from tfmw_notebook.widgets.figures import SCALE, shown_width

    store = MetricsStore()
    store.feed({"kind": "epoch", "rank": 0, "time": 1.0, "epoch": 0,
                "logs": {"loss": 1.0, "mae": 0.5}})
    dashboard = Dashboard(store)
    dashboard.refresh(force=True)
    drawn = int.from_bytes(dashboard.image.value[16:20], "big")
    assert drawn == 2 * 4.0 * 80 * SCALE        # two panels of 4 figure inches
    assert dashboard.image.layout.width == f"{shown_width(dashboard.image.value)}px" == "640px"
    assert dashboard.image.layout.max_width == "100%"   # a narrow window shrinks it


def test_each_epoch_s_running_mean_is_a_line_of_its_own():
    """Keras' batch logs restart their mean with each epoch: the curve has a gap there
    instead of a line down to the next epoch's first value."""
    from tfmw_notebook.widgets.curves import _per_epoch

    xs, ys = _per_epoch([0.5, 1.0, 1.5, 2.0], [4.0, 3.0, 3.0, 2.0])
    assert xs[:2] == [0.5, 1.0] and math.isnan(xs[2]) and xs[3:] == [1.5, 2.0]
    assert ys[:2] == [4.0, 3.0] and math.isnan(ys[2]) and ys[3:] == [3.0, 2.0]


def test_nothing_to_sum_up_gives_no_summary_line():
    """A cell that failed before an epoch ended (an evaluate cut short by a dead worker)
    leaves no '0 epochs · 0.0 s' behind."""
    from tfmw_notebook.widgets.summaries import summary_text

    store = MetricsStore()
    store.feed({"kind": "train_begin", "rank": 0, "time": 0.0, "epochs": None, "steps": 5,
                "mode": "evaluate"})
    assert summary_text(store.summary()) == ""
    store.feed({"kind": "epoch", "rank": 0, "time": 1.0, "epoch": 0, "logs": {"loss": 0.5}})
    assert summary_text(store.summary()).startswith("1 epoch · ")


def test_a_finished_cell_leaves_no_dashboard_widget_open(monkeypatch):
    # The static image replaces the live view; its widgets (image, progress rows, their
    # layouts) must not stay registered, each holding a comm and the last PNG.
    from ipywidgets.widgets import widget as widget_module
    from tfmw_notebook.widgets import live

    handles = []

    class Handle:
        def update(self, obj):
            handles.append(obj)

    monkeypatch.setattr("IPython.display.display", lambda *a, **k: Handle())
    before = set(widget_module._instances)
    run = live.LiveRun(widgets=True)
    run.on_data(0, {"tfmw-events-1": [begin(0), batch(0, 0), batch(0, 1),
                                      {"kind": "epoch", "rank": 0, "time": 1.0, "epoch": 0,
                                       "logs": {"loss": 0.5}}]})
    run.on_data(1, {"tfmw-events-1": [begin(1), batch(1, 0)]})
    assert len(set(widget_module._instances) - before) > 5   # the live view was built
    run.finish()
    assert set(widget_module._instances) - before == set()
    assert handles, "the static image was not shown in the view's place"


def test_events_are_taken_in_at_once_and_shown_at_most_every_quarter_second(monkeypatch):
    # A refresh updates every worker's row: once per publish it cost the notebook 10-20%
    # of a core. Whatever arrives is in the store at once; the view catches up in turn.
    from tfmw_notebook.widgets import live

    clock = FakeClock()
    monkeypatch.setattr(live.time, "monotonic", clock)
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: None)
    run = live.LiveRun(widgets=True)
    refreshes = []
    for rank in range(8):
        run.on_data(rank, {"tfmw-events-1": [begin(rank), batch(rank, 0)]})
        if rank == 0:
            monkeypatch.setattr(run._view, "refresh", lambda: refreshes.append(clock.now))
    assert sorted(run.store.ranks) == list(range(8)) and refreshes == []
    clock.now += 0.2
    run.on_data(0, {"tfmw-events-1": [begin(0), batch(0, 0)]})
    assert refreshes == []
    clock.now += 0.1
    run.on_data(0, {"tfmw-events-1": [begin(0), batch(0, 0)]})
    assert refreshes == [clock.now]
    monkeypatch.undo()
    run._view.refresh()
    assert [row.children[1].value for row in run._view.progress_box.children][-1] == \
        "worker 7: epoch 1/2 step 1/20"
    run.finish()


def test_no_broken_image_before_the_first_drawing():
    """An Image widget with no data is a broken-image icon in JupyterLab: until the
    first drawing the image is hidden and a placeholder says what is awaited."""
    dashboard = Dashboard(MetricsStore())
    assert dashboard.image.value == b"" and dashboard.image.layout.display == "none"
    assert "waiting for the first batch" in dashboard.waiting.value
    assert dashboard.waiting in dashboard.widget.children
    assert dashboard.waiting.layout.display != "none"
    dashboard.feed([begin(0), batch(0, 0)])
    dashboard.refresh(force=True)
    assert bytes(dashboard.image.value).startswith(PNG_SIGNATURE)
    assert dashboard.image.layout.display != "none"
    assert dashboard.waiting.layout.display == "none"


def yscales(monkeypatch, store):
    """The y scale of each panel the curves are drawn with."""
    from matplotlib.axes import Axes
    from tfmw_notebook.widgets.curves import render_curves_png

    drawn = []
    real_savefig = __import__("matplotlib.figure", fromlist=["Figure"]).Figure.savefig

    def savefig(figure, *args, **kwargs):
        drawn.extend(axes.get_yscale() for axes in figure.axes if isinstance(axes, Axes))
        return real_savefig(figure, *args, **kwargs)

    monkeypatch.setattr("matplotlib.figure.Figure.savefig", savefig)
    assert render_curves_png(store).startswith(PNG_SIGNATURE)
    return drawn


def test_a_curve_over_more_than_3_orders_of_magnitude_gets_a_log_axis(monkeypatch):
    store = MetricsStore()
    for epoch, loss in enumerate([2.0, 1e-3, 1e-8, 1e-14]):
        store.feed({"kind": "epoch", "rank": 0, "time": float(epoch), "epoch": epoch,
                    "logs": {"loss": loss, "accuracy": 0.5 + 0.1 * epoch}})
    assert yscales(monkeypatch, store) == ["log", "linear"]   # panels: loss, accuracy


@pytest.mark.parametrize("values, log", [
    ([1.0, 1e-3], False), ([1.0, 2e-3, 0.5], False), ([2.0, 1e-3], True),
    ([1.0, 1e-14, float("nan")], True), ([1.0, 0.0, 1e-9], False), ([-1.0, 1e-9], False),
    ([], False), ([float("nan")], False),
])
def test_when_an_axis_is_logarithmic(values, log):
    from tfmw_notebook.widgets.figures import wants_log_scale

    assert wants_log_scale(values) is log


def test_matplotlib_is_imported_off_the_watch_loop_once_a_cluster_is_up():
    """The start's background import leaves the dashboard's first drawing nothing to import
    (in a fresh interpreter: other tests here have imported matplotlib already)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from tfmw_notebook.widgets.figures import import_matplotlib_in_background\n"
            "assert 'matplotlib.figure' not in sys.modules\n"
            "thread = import_matplotlib_in_background()\n"
            "assert thread is not None and thread.daemon\n"
            "thread.join(60)\n"
            "print(sorted(m for m in ('matplotlib.figure', 'matplotlib.backends.backend_agg',"
            " 'matplotlib.pyplot') if m in sys.modules), import_matplotlib_in_background())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split("\n")[0]
    # Agg and the figure, not pyplot (its global backend stays the notebook's), and a
    # second call has nothing to do.
    assert out == "['matplotlib.backends.backend_agg', 'matplotlib.figure'] None", out


@pytest.mark.parametrize("points, expected", [
    ([0.038, 0.042], (0, 1)),       # a fit's first steps: the first epoch, whole
    ([0.0, 0.9], (0, 1)),
    ([1.0, 1.5], (1, 2)),
])
def test_an_epoch_axis_with_less_than_two_whole_epochs_in_view_spans_the_epoch(points,
                                                                              expected):
    from matplotlib.figure import Figure
    from tfmw_notebook.widgets.figures import whole_epoch_ticks

    axes = Figure().add_subplot()
    axes.plot(points, [1.0, 2.0])
    whole_epoch_ticks(axes)
    assert axes.get_xlim() == expected
    assert all(float(tick).is_integer() for tick in axes.get_xticks())


def test_an_epoch_axis_over_several_epochs_keeps_its_view():
    from matplotlib.figure import Figure
    from tfmw_notebook.widgets.figures import whole_epoch_ticks

    axes = Figure().add_subplot()
    axes.plot([0.5, 3.2], [1.0, 2.0])
    before = axes.get_xlim()
    whole_epoch_ticks(axes)
    assert axes.get_xlim() == before
