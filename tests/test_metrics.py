"""The pure metrics store, driven with plain event dicts."""

import numpy as np
import pytest
from tfmw_notebook.widgets.metrics import MetricsStore, panel_name, plain_floats

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def begin(rank, t=0.0, epochs=2, steps=4, mode="fit"):
    return {"kind": "train_begin", "rank": rank, "time": t, "epochs": epochs, "steps": steps,
            "mode": mode}


def batch(rank, t, epoch, step, **logs):
    return {"kind": "batch", "rank": rank, "time": t, "epoch": epoch, "step": step, "logs": logs}


def epoch_end(rank, t, epoch, samples=None, **logs):
    event = {"kind": "epoch", "rank": rank, "time": t, "epoch": epoch, "logs": logs}
    if samples is not None:
        event["samples"] = samples
    return event


def end(rank, t, **fields):
    return {"kind": "train_end", "rank": rank, "time": t, **fields}


def one_epoch(rank, epoch, t0, steps=4, step_time=0.5, loss0=1.0, **epoch_logs):
    """Batch events then the epoch event, `step_time` apart."""
    events = [batch(rank, t0 + (s + 1) * step_time, epoch, s, loss=loss0 - 0.1 * s)
              for s in range(steps)]
    events.append(epoch_end(rank, t0 + steps * step_time + 0.1, epoch, **epoch_logs))
    return events


def test_history_is_keras_shaped_and_keeps_copies():
    store = MetricsStore()
    logs = {"loss": 0.5, "accuracy": 0.8, "val_loss": 0.6, "val_accuracy": 0.7}
    store.feed([begin(0), epoch_end(0, 1.0, 0, **logs)])
    logs["loss"] = 99.0                           # the caller reuses its dict
    store.feed(epoch_end(0, 2.0, 1, loss=0.4, accuracy=0.9, val_loss=0.5, val_accuracy=0.75))
    assert store.history(0) == {"loss": [0.5, 0.4], "accuracy": [0.8, 0.9],
                                "val_loss": [0.6, 0.5], "val_accuracy": [0.7, 0.75]}
    store.epoch_logs(0)[0]["logs"]["loss"] = -1    # nor can readers change the store
    assert store.history()["loss"] == [0.5, 0.4]


def test_values_become_plain_floats_and_non_numbers_are_dropped():
    logs = {"loss": np.float32(0.5), "n": np.int64(3), "name": "x", "arr": np.ones(3)}
    assert plain_floats(logs) == {"loss": 0.5, "n": 3.0}
    store = MetricsStore()
    store.feed(epoch_end(0, 1.0, 0, loss=np.float64(0.25)))
    assert type(store.history(0)["loss"][0]) is float


def test_batches_sit_at_fractional_epochs_and_epoch_ends_at_whole_ones():
    store = MetricsStore()
    store.feed([begin(0, steps=4)] + one_epoch(0, 0, 0.0, loss=0.7)
               + one_epoch(0, 1, 3.0, loss=0.6))
    assert [x for x, _ in store.batch_logs(0)] == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]
    assert store.batch_logs(0)[1] == (0.5, {"loss": pytest.approx(0.9)})
    assert store.epoch_series()["loss"] == ([1.0, 2.0], [0.7, 0.6])


def test_merged_history_is_the_per_epoch_mean_over_workers():
    store = MetricsStore()
    store.feed([epoch_end(0, 1.0, 0, loss=1.0), epoch_end(1, 1.0, 0, loss=3.0),
                epoch_end(0, 2.0, 1, loss=0.5), epoch_end(1, 2.0, 1, loss=1.5),
                epoch_end(0, 3.0, 2, loss=0.2)])          # rank 1 has not finished epoch 2 yet
    assert store.merged_history() == {"loss": [2.0, 1.0, 0.2]}
    assert store.history(1) == {"loss": [3.0, 1.5]}


def test_val_metrics_share_a_panel_with_their_training_metric():
    store = MetricsStore()
    store.feed([batch(0, 0.1, 0, 0, loss=1.0, accuracy=0.5),
                epoch_end(0, 1.0, 0, loss=1.0, accuracy=0.5, val_loss=1.2, val_accuracy=0.4,
                          val_auc=0.6)])
    assert store.metric_names() == {"loss": ["loss", "val_loss"],
                                    "accuracy": ["accuracy", "val_accuracy"],
                                    "auc": ["val_auc"]}
    assert panel_name("val_loss") == "loss" and panel_name("loss") == "loss"


def test_latest_takes_the_newest_value_of_each_metric():
    store = MetricsStore()
    store.feed([batch(0, 1.0, 0, 0, loss=0.9), batch(1, 2.0, 0, 0, loss=0.8),
                epoch_end(0, 1.5, 0, loss=0.85, val_loss=1.1)])
    assert store.latest() == {"loss": 0.8, "val_loss": 1.1}


def test_progress_counts_steps_and_measures_speed_and_eta():
    store = MetricsStore()
    # 4 steps per epoch, 2 epochs, one step every 0.5 s.
    store.feed([begin(0, t=0.0, epochs=2, steps=4)] + one_epoch(0, 0, 0.0, step_time=0.5)[:3])
    progress = store.progress(0)
    assert (progress.epoch, progress.step, progress.steps, progress.epochs) == (0, 3, 4, 2)
    assert progress.steps_per_second == pytest.approx(2.0)
    assert progress.eta_seconds == pytest.approx(5 / 2.0)     # 5 of 8 steps left at 2 steps/s
    assert progress.fraction == pytest.approx(3 / 8)
    assert progress.last_event_time == 1.5 and not progress.finished
    store.feed(end(0, 2.5))
    assert store.progress(0).finished and store.progress(0).eta_seconds == 0
    assert store.progress(0).fraction == 1.0


def test_eta_without_steps_per_epoch_goes_by_epoch_duration():
    store = MetricsStore()
    store.feed([begin(0, t=0.0, epochs=4, steps=None), batch(0, 1.0, 0, 0, loss=1.0),
                epoch_end(0, 10.0, 0, loss=1.0)])
    progress = store.progress(0)
    assert progress.position == 1.0 and progress.fraction == 0.25
    assert progress.eta_seconds == pytest.approx(30.0)         # 3 epochs of 10 s left


def test_a_rank_behind_by_a_tenth_of_an_epoch_is_lagging():
    store = MetricsStore()
    store.feed([begin(0, steps=20), begin(1, steps=20)])
    store.feed([batch(0, 1.0, 0, s, loss=1.0) for s in range(10)])
    store.feed([batch(1, 1.0, 0, s, loss=1.0) for s in range(9)])
    assert store.lagging_ranks() == []                           # 1 step = 5% behind
    store.feed([batch(0, 1.1, 0, 10, loss=1.0)])
    assert store.lagging_ranks() == [1]                          # 2 steps = 10% behind
    store.feed([batch(1, 1.2, 0, s, loss=1.0) for s in range(9, 11)])
    assert store.lagging_ranks() == []


def test_lagging_by_whole_epochs_without_step_counts():
    store = MetricsStore()
    store.feed([begin(0, steps=None), begin(1, steps=None),
                epoch_end(0, 1.0, 0, loss=1.0), epoch_end(1, 1.0, 0, loss=1.0),
                epoch_end(0, 2.0, 1, loss=1.0)])
    assert store.lagging_ranks() == [1]


def test_a_finished_rank_is_not_lagging_but_one_that_has_not_started_the_next_run_is():
    store = MetricsStore()
    store.feed([begin(0, steps=4, epochs=1), begin(1, steps=4, epochs=1)])
    store.feed(one_epoch(0, 0, 0.0) + one_epoch(1, 0, 0.0) + [end(0, 3.0), end(1, 3.0)])
    assert store.lagging_ranks() == []
    store.feed([begin(0, 4.0, epochs=1, steps=4, mode="evaluate"), batch(0, 4.5, 0, 0, loss=1.0)])
    assert store.lagging_ranks() == [1]                          # rank 0 is 25% into evaluate


def test_report_events_from_custom_loops():
    store = MetricsStore()
    def report(rank, time, step, epoch, loss):
        return {"kind": "report", "rank": rank, "time": time, "step": step, "epoch": epoch,
                "metrics": {"loss": loss}}

    store.feed([report(0, 1.0, 5, None, 0.3), report(0, 2.0, 6, 1.5, 0.2),
                report(1, 2.0, None, None, 0.4)])
    assert [(r["x"], r["metrics"]) for r in store.reports(0)] == \
        [(5, {"loss": 0.3}), (1.5, {"loss": 0.2})]
    assert store.reports(1)[0]["x"] == 0                          # no step: counted
    assert store.report_series(0)["loss"] == ([1.5, 5], [0.2, 0.3])
    assert store.latest() == {"loss": 0.2}                        # same time: the lower rank wins
    assert store.progress(0).mode == "custom" and store.progress(0).step == 6
    assert store.metric_names() == {"loss": ["loss"]}


def test_unknown_and_malformed_events_are_ignored():
    store = MetricsStore()
    store.feed([{"kind": "from_the_future", "rank": 0, "time": 1.0},
                {"kind": "epoch", "time": 1.0, "epoch": 0, "logs": {}},   # no rank
                "not an event",
                {"kind": "batch", "rank": 0, "time": 1.0, "epoch": 0, "logs": {}},  # no step
                epoch_end(0, 2.0, 0, loss=1.0)])
    assert store.ignored_events == 4
    assert store.history(0) == {"loss": [1.0]}


def test_lost_events_the_workers_tell_of_are_summed_and_reach_the_summary():
    store = MetricsStore()
    store.feed([begin(0, t=0.0), epoch_end(0, 1.0, 0, loss=1.0) | {"dropped": 3},
                epoch_end(1, 1.0, 0, loss=1.0) | {"dropped": 2},
                {"kind": "from_the_future", "rank": 1, "time": 2.0, "dropped": 1},
                epoch_end(0, 2.0, 1, loss=0.5) | {"dropped": "garbled"}])
    assert store.lost_events == 6
    assert store.history(0) == {"loss": [1.0, 0.5]}              # a garbled count costs nothing
    summary = store.summary()
    assert summary["lost_events"] == 6 and summary["ignored_events"] == 1


def test_summary_says_nothing_of_lost_or_ignored_events_when_there_are_none():
    store = MetricsStore()
    store.feed([begin(0, t=0.0), epoch_end(0, 1.0, 0, loss=1.0) | {"dropped": 0}])
    assert "lost_events" not in store.summary() and "ignored_events" not in store.summary()
    store.feed(["not an event"])
    assert store.summary()["ignored_events"] == 1


def test_summary_with_samples():
    store = MetricsStore()
    store.feed([begin(0, t=10.0), begin(1, t=10.5),
                epoch_end(0, 15.0, 0, samples=640, loss=0.5, val_loss=0.6),
                epoch_end(1, 15.0, 0, samples=640, loss=0.7, val_loss=0.8),
                epoch_end(0, 20.0, 1, samples=640, loss=0.3, val_loss=0.4),
                epoch_end(1, 20.0, 1, samples=640, loss=0.5, val_loss=0.6),
                end(0, 20.0), end(1, 20.0)])
    summary = store.summary()
    assert summary["epochs"] == 2 and summary["workers"] == 2
    assert summary["wall_time"] == pytest.approx(10.0)
    assert summary["final"] == pytest.approx({"loss": 0.4, "val_loss": 0.5})
    assert summary["samples_per_second"] == pytest.approx(4 * 640 / 10.0)


def test_summary_without_samples_omits_samples_per_second():
    store = MetricsStore()
    store.feed([begin(0, t=0.0), epoch_end(0, 4.0, 0, loss=0.5), end(0, 4.0)])
    summary = store.summary()
    assert "samples_per_second" not in summary
    assert summary["final"] == {"loss": 0.5} and summary["wall_time"] == 4.0


def test_summary_of_an_empty_store():
    assert MetricsStore().summary() == {"epochs": 0, "wall_time": None, "final": {}, "workers": 0}


def test_a_second_fit_continues_the_x_axis_and_initial_epoch_is_respected():
    store = MetricsStore()
    store.feed([begin(0, epochs=1, steps=2)] + one_epoch(0, 0, 0.0, steps=2, loss=1.0)
               + [end(0, 2.0)])
    store.feed([begin(0, 3.0, epochs=1, steps=2)] + one_epoch(0, 0, 3.0, steps=2, loss=0.5)
               + [end(0, 5.0)])
    assert store.epoch_series(0)["loss"] == ([1.0, 2.0], [1.0, 0.5])
    assert [x for x, _ in store.batch_logs(0)] == [0.5, 1.0, 1.5, 2.0]
    # fit(initial_epoch=2, epochs=3): Keras already numbers the epoch 2.
    store.feed([begin(0, 6.0, epochs=3, steps=2)] + one_epoch(0, 2, 6.0, steps=2, loss=0.25))
    assert store.epoch_series(0)["loss"][0] == [1.0, 2.0, 3.0]
    assert store.history(0) == {"loss": [1.0, 0.5, 0.25]}
    assert store.progress(0).run == 3 and store.progress(0).fraction == 1.0


def test_custom_loop_summary_counts_the_epochs_its_reports_reached():
    store = MetricsStore()
    store.feed([{"kind": "report", "rank": 0, "time": float(i), "step": i, "epoch": i / 10,
                 "metrics": {"loss": 1.0 / (i + 1)}} for i in range(25)])
    assert store.summary()["epochs"] == 3


def test_evaluate_only_run_has_no_curves_but_a_summary():
    store = MetricsStore()
    store.feed([{"kind": "train_begin", "rank": 0, "time": 1.0, "epochs": None, "steps": 2,
                 "mode": "evaluate"},
                {"kind": "batch", "rank": 0, "time": 2.0, "epoch": 0, "step": 0,
                 "logs": {"loss": 1.0}},
                {"kind": "train_end", "rank": 0, "time": 3.0, "logs": {"loss": 0.5}}])
    assert store.metric_names() == {}
    assert store.summary()["evaluation"] == {"loss": 0.5}


def test_the_store_knows_when_batch_values_are_keras_epoch_means():
    store = MetricsStore()
    store.feed([begin(0, epochs=1, steps=2)])
    assert not store.batch_values_are_epoch_means()       # a custom train_step: as logged
    store.feed([dict(begin(1, epochs=1, steps=2), running_means=True)])
    assert store.batch_values_are_epoch_means()


def test_batch_logs_of_a_custom_train_step_are_drawn_as_they_are():
    store = MetricsStore()
    store.feed([begin(0, epochs=1, steps=2), batch(0, 1.0, 0, 0, loss=4.0),
                batch(0, 2.0, 0, 1, loss=3.0)])
    assert store.batch_series(0)["loss"] == ([0.5, 1.0], [4.0, 3.0])
