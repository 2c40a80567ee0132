"""Sweeps, the pure parts: the --sweep specs, the grid and the sampling, the median rule,
the trials' outcomes (with a stand-in for the cluster), and the one-line errors."""

import math

import pytest
from IPython.core.error import UsageError
from tfmw_notebook.cluster.runs import median_rule, sweep_space
from tfmw_notebook.cluster.runs.sweep import SweepPlan, SweepRunner
from tfmw_notebook.errors import Failure, WorkerFailed
from tfmw_notebook.protocol.run_options import CellOptions, TrialMonitor
from tfmw_notebook.widgets.sweep_table import table_html, trial_line

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


@pytest.mark.parametrize("text, values", [
    ("batch=32,64", (32, 64)),
    ("lr=1e-3,0.01, 1", (0.001, 0.01, 1.0)),
    ("opt=adam,sgd", ("adam", "sgd")),
    ("bias=True,False", (True, False)),
    ("n=-3", (-3,)),
])
def test_listed_values_are_typed_as_a_whole(text, values):
    dim = sweep_space.parse_dimension(text)
    assert dim.values == values
    assert [type(v) for v in dim.values] == [type(v) for v in values]


def test_distributions_parse():
    dim = sweep_space.parse_dimension("lr=loguniform:1e-4:1e-1")
    assert (dim.kind, dim.low, dim.high) == ("loguniform", 1e-4, 0.1)
    assert sweep_space.parse_dimension("drop=uniform:0:0.5").kind == "uniform"


@pytest.mark.parametrize("texts, message", [
    (["lr="], "no values"),
    (["lr=1e-3,,1e-2"], "an empty value"),
    (["lr"], "write NAME=V1,V2"),
    (["lr=1e-3,1e-2x"], "'1e-2x' is not a number like '1e-3'"),
    (["lr=uniform:1:1"], "LOW must be below HIGH"),
    (["lr=uniform:2:1"], "LOW must be below HIGH"),
    (["lr=loguniform:0:1"], "loguniform needs LOW > 0"),
    (["lr=loguniform:-1:1"], "loguniform needs LOW > 0"),
    (["lr=uniform:a:1"], "expected two finite numbers"),
    (["lr=uniform:1"], "expected two finite numbers"),
    (["lr=uniform:0:inf"], "expected two finite numbers"),
    (["lr=normal:0:1"], "unknown distribution 'normal'"),
    (["lr=1,2", "lr=3"], "given twice"),
    (["2lr=1,2"], "is not a Python name"),
    (["learning-rate=1,2"], "is not a Python name"),
    (["class=1,2"], "is not a Python name"),
    (["strategy=a,b"], "would replace the workers' own `strategy`"),
])
def test_bad_specs_are_one_line_errors(texts, message):
    with pytest.raises(ValueError) as error:
        sweep_space.dimensions(texts)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_grid_is_every_combination_last_name_fastest():
    dims = sweep_space.dimensions(["lr=1e-3,1e-2,1e-1", "batch=32,64"])
    trials = sweep_space.plan(dims)
    assert trials == [{"lr": lr, "batch": b} for lr in (1e-3, 1e-2, 1e-1) for b in (32, 64)]


def test_a_huge_grid_is_refused():
    dims = sweep_space.dimensions([f"a{i}=" + ",".join(map(str, range(10))) for i in range(5)])
    with pytest.raises(ValueError, match="the grid has 100000 combinations"):
        sweep_space.plan(dims)


def test_sampling_is_seeded_in_range_and_draws_listed_values():
    dims = sweep_space.dimensions(["lr=loguniform:1e-4:1e-1", "batch=32,64",
                                   "drop=uniform:0:0.5"])
    first = sweep_space.plan(dims, trials=20, seed=0)
    assert first == sweep_space.plan(dims, trials=20, seed=0)
    assert first != sweep_space.plan(dims, trials=20, seed=1)
    assert all(1e-4 <= t["lr"] <= 1e-1 and 0 <= t["drop"] <= 0.5 and t["batch"] in (32, 64)
               for t in first)
    # log-uniform: about as many below 1e-2.5 (the log midpoint) as above
    low = sum(math.log10(t["lr"]) < -2.5 for t in sweep_space.plan(dims, trials=400, seed=3))
    assert 150 < low < 250


@pytest.mark.parametrize("space, trials, seed, message", [
    (["lr=loguniform:1e-4:1e-1"], None, None, "needs --trials K"),
    (["lr=1e-3,1e-2"], 3, None, "drop --trials"),
    (["lr=1e-3,1e-2"], None, 0, "drop --seed"),
    (["lr=loguniform:1e-4:1e-1"], 0, 0, "expected a whole number >= 1"),
])
def test_trials_and_seed_must_fit_the_space(space, trials, seed, message):
    with pytest.raises(ValueError, match=message):
        SweepPlan.make(space, trials=trials, seed=seed)


def test_a_random_sweep_without_a_seed_draws_one_and_keeps_it():
    plan = SweepPlan.make(["lr=loguniform:1e-4:1e-1"], trials=3)
    assert plan.seed is not None
    again = SweepPlan.make(["lr=loguniform:1e-4:1e-1"], trials=3, seed=plan.seed)
    assert again.combinations == plan.combinations


def test_prune_needs_a_metric_and_a_known_rule():
    with pytest.raises(ValueError, match="--prune needs a metric"):
        SweepPlan.make(["lr=1,2"], prune="median", monitor="")
    with pytest.raises(ValueError, match="the rules are median"):
        SweepPlan.make(["lr=1,2"], prune="mean")


def test_median_rule_needs_two_earlier_values_and_skips_nan():
    assert median_rule.thresholds([]) == ()
    assert median_rule.thresholds([[1.0, 0.5]]) == (None, None)
    assert median_rule.thresholds([[1.0, 0.5], [3.0], [2.0, 0.7, 0.1]]) == (2.0, 0.6, None)
    assert median_rule.thresholds([[1.0], [math.nan], [2.0]]) == (1.5,)


def test_trial_monitor_stops_only_when_worse():
    monitor = TrialMonitor("val_loss", "min", (1.0, None))
    assert monitor.stops(0, 1.5) and not monitor.stops(0, 1.0) and not monitor.stops(0, 0.5)
    assert monitor.stops(0, math.nan)
    assert not monitor.stops(1, 99.0) and not monitor.stops(5, 99.0)
    assert TrialMonitor("acc", "max", (0.5,)).stops(0, 0.4)
    assert monitor.key({"loss": 1}) == "loss" and monitor.key({"val_loss": 1, "loss": 2}) \
        == "val_loss"
    assert TrialMonitor("acc", fallback=None).key({"loss": 1}) is None
    with pytest.raises(ValueError, match="Expected one of"):
        TrialMonitor(mode="sideways")
    with pytest.raises(ValueError, match="TrialMonitor or None"):
        CellOptions(trial={"monitor": "loss"})


def _failed(kind, *, kept=True, recovered=False):
    return WorkerFailed(Failure(f"worker 1 failed ({kind})", kind=kind), kept=kept,
                        recovered=recovered)


def _runner(space, outcomes, *, prune=None, grace=0.0, monitor="loss"):
    """A runner whose trials end as `outcomes` says: a report dict, or an exception."""
    plan = SweepPlan.make(space, prune=prune, monitor=monitor)
    seen = []

    def run_trial(trial, monitor):
        seen.append((trial.number, trial.values, monitor))
        outcome = outcomes[trial.number - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return SweepRunner(plan, run_trial, interrupt_grace=grace), seen


def _report(values, pruned_at=None):
    return {"metric": "loss", "values": values, "pruned_at": pruned_at}


def test_a_failed_trial_ends_alone_and_the_median_counts_finished_trials():
    runner, seen = _runner(["lr=1,2,3,4"], [_report([1.0, 0.5]), _failed("error"),
                                           _report([3.0, 0.9]), _report([9.0], 1)],
                           prune="median")
    result = runner.run()
    assert [t.outcome for t in result.trials] == ["completed", "failed", "completed", "pruned"]
    assert result.trials[1].error == "worker 1 failed (error)"
    assert seen[3][2].thresholds == (2.0, 0.7)   # trials 1 and 3, not the failed one
    assert seen[0][2].thresholds == ()
    assert result.best().number == 1
    assert "4 of 4 trials: 2 completed, 1 pruned, 1 failed; best: trial 1 (lr=1)" in \
        result.summary()


def test_an_interrupt_ends_the_trial_a_second_one_the_sweep():
    runner, _ = _runner(["lr=1,2,3"], [_failed("interrupt"), _report([1.0]), _report([1.0])])
    result = runner.run()
    assert [t.outcome for t in result.trials] == ["interrupted", "completed", "completed"]
    runner, _ = _runner(["lr=1,2,3"], [_report([1.0]), KeyboardInterrupt(), _report([1.0])])
    result = runner.run()
    assert [t.outcome for t in result.trials] == ["completed", "interrupted"]
    assert "interrupted during trial 2" in result.summary()


def test_a_press_held_during_the_trials_restart_ends_the_sweep(monkeypatch):
    presses = iter([0, 1])   # before the trial; after it (held while the workers restarted)
    monkeypatch.setattr("tfmw_notebook.cluster.runs.sweep.presses_held", lambda: next(presses))
    runner, _ = _runner(["lr=1,2"], [_failed("interrupt", kept=False, recovered=True),
                                     _report([1.0])])
    result = runner.run()
    assert [t.outcome for t in result.trials] == ["interrupted"]
    assert result.ended == "interrupted twice during trial 1"


def test_an_interrupt_within_the_grace_ends_the_sweep(monkeypatch):
    def interrupted(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr("tfmw_notebook.cluster.runs.sweep.time.sleep", interrupted)
    runner, _ = _runner(["lr=1,2,3"], [_failed("interrupt"), _report([1.0]), _report([1.0])],
                        grace=5.0)
    result = runner.run()
    assert [t.outcome for t in result.trials] == ["interrupted"]
    assert result.ended == "interrupted twice (trial 1 and after it)"


def test_a_metric_the_fits_do_not_log_is_said_once(capsys):
    report = {"metric": None, "values": [], "pruned_at": None, "logged": ["loss", "mae"]}
    runner, _ = _runner(["lr=1,2"], [report, report], prune="median", monitor="accuracy")
    result = runner.run()
    assert [t.outcome for t in result.trials] == ["completed", "completed"]
    assert capsys.readouterr().err.count("the fits log no 'accuracy' (they log loss, mae)") \
        == 1


def test_lost_workers_end_the_sweep():
    runner, _ = _runner(["lr=1,2"], [_failed("died", kept=False), _report([1.0])])
    result = runner.run()
    assert [t.outcome for t in result.trials] == ["failed"]
    assert "the workers were lost after trial 1" in result.summary()


def test_the_table_shows_values_metrics_and_outcomes():
    runner, _ = _runner(["lr=0.5,2"], [_report([1.0, 0.25]), _report([9.0], 1)])
    rows = runner.run().records()
    page = table_html(rows, metric="loss", footer="best: trial 1")
    assert "<th style='padding:2px 8px;text-align:left'>lr</th>" in page
    assert "final loss" in page
    assert "pruned at epoch 1" in page and "0.25" in page and "best: trial 1" in page
    assert trial_line(rows[0], "loss") == \
        "trial 1 (lr=0.5): completed, final loss 0.25, best 0.25"
    failed = dict(rows[1], outcome="failed", error="worker 1 failed: ValueError: bad")
    assert "failed on worker 1: ValueError: bad" in table_html([failed], metric="loss")



@pytest.mark.parametrize("line, message", [
    ("--sweep lr=", "--sweep lr=: no values"),
    ("--sweep lr=1,x", "'x' is not a number like '1'"),
    ("--sweep lr=loguniform:0:1 --trials 2", "loguniform needs LOW > 0"),
    ("--sweep lr=1,2 --trials 2", "drop --trials"),
    ("--trials 3", "--trials belongs to a sweep"),
    ("--prune median", "--prune belongs to a sweep"),
    ("--sweep lr=1 --prune mean", "invalid choice: 'mean'"),
    ("--sweep lr=1 --trials 0", "expected a whole number >= 1, got 0"),
    ("--sweep lr=1 --seed x", "invalid int value: 'x'"),
    ("--sweep lr=1 --sweep lr=2", "--sweep lr: given twice"),
])
def test_magic_misuse_is_one_line_and_runs_nothing(ip, line, message):
    ip.user_ns["precious"] = 42
    with pytest.raises(UsageError) as error:
        ip.run_cell_magic("tfdist", line, "precious = 0")
    assert message in str(error.value) and "\n" not in str(error.value)
    assert ip.user_ns["precious"] == 42


def test_a_checked_sweep_still_needs_a_cluster(ip):
    with pytest.raises(UsageError, match="no cluster is running"):
        ip.run_cell_magic("tfdist", "--sweep lr=1,2", "x = lr")
