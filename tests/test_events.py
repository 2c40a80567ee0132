"""The event protocol both sides import: kinds, publish keys, and the one float coercion."""

import ast
import decimal
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from tfmw_notebook.protocol import events
from tfmw_notebook.protocol.events import (
    KIND_FIELDS,
    EventReader,
    events_key,
    metric_value,
    metric_values,
    new_events,
)
from tfmw_notebook.widgets.metrics import MetricsStore, plain_floats
from tfmw_notebook.worker.liveness import reporting
from tfmw_notebook.worker.liveness.reporting import EventPublisher

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One well-formed event of each kind, with every field its kind may carry.
EXAMPLES = {
    "train_begin": {"epochs": 2, "steps": 4, "mode": "fit", "running_means": True},
    "batch": {"epoch": 0, "step": 0, "logs": {"loss": 1.0}},
    "epoch": {"epoch": 0, "logs": {"loss": 1.0}, "samples": 64, "steps": 2},
    "train_end": {"logs": {}},
    "report": {"step": 1, "epoch": None, "metrics": {"loss": 0.5}},
}


def test_the_store_reads_every_kind_of_the_protocol():
    assert set(KIND_FIELDS) == set(EXAMPLES)
    store = MetricsStore()
    for time, (kind, fields) in enumerate(EXAMPLES.items()):
        assert set(fields) == set(KIND_FIELDS[kind])
        store.feed(dict(fields, kind=kind, rank=0, time=float(time)))
    assert store.ignored_events == 0 and store.lost_events == 0


def test_publish_keys_round_trip_through_new_events():
    assert events_key(7) == "tfmw-events-7"
    data = {events_key(2): [{"n": 2}], events_key(1): [{"n": 1}], "user-key": [{"n": -1}]}
    assert new_events(data, 0) == ([{"n": 1}, {"n": 2}], 2)


def test_both_sides_use_the_same_protocol_objects():
    assert reporting.new_events is events.new_events and reporting.events_key is events.events_key
    assert plain_floats is metric_values


@pytest.mark.parametrize("value, expected", [
    (0.5, 0.5), (3, 3.0), (np.float32(0.25), 0.25), (np.int64(3), 3.0),
    (np.array(1.5), 1.5), (decimal.Decimal("0.125"), 0.125), (float("inf"), math.inf),
])
def test_numbers_become_plain_floats(value, expected):
    number = metric_value(value)
    assert number == expected and type(number) is float


class HasFloat:
    """Stands in for a scalar tensor: no ndim of its own, but __float__."""

    def __float__(self):
        return 0.75


class BrokenFloat:
    def __float__(self):
        raise ValueError("not a number today")


@pytest.mark.parametrize("value", [
    "0.5", b"1", None, [1.0], {"a": 1}, np.ones(1), np.ones(3), 1j, 10 ** 400, BrokenFloat(),
])
def test_values_that_are_not_single_numbers_are_none(value):
    assert metric_value(value) is None


def test_anything_with_float_and_no_dimensions_counts():
    assert metric_value(HasFloat()) == 0.75


def test_nan_is_kept_so_a_diverging_loss_shows():
    assert math.isnan(metric_value(float("nan")))
    assert math.isnan(metric_values({"loss": np.float32("nan")})["loss"])


def test_metric_values_keeps_numbers_and_stringifies_names():
    assert metric_values({"loss": np.float32(0.5), 3: 1, "name": "x", "arr": np.ones(2)}) == \
        {"loss": 0.5, "3": 1.0}
    assert metric_values(None) == {}


def test_the_publisher_and_the_store_coerce_the_same_way():
    odd = {"loss": np.float64(0.5), "text": "0.25", "vector": np.ones(2), "nan": float("nan")}
    published = []
    EventPublisher(published.append, rank=0).report(odd, step=1)
    (sent,) = published[0][events_key(1)]
    assert set(sent["metrics"]) == {"loss", "nan"}

    store = MetricsStore()
    store.feed({"kind": "epoch", "rank": 0, "time": 1.0, "epoch": 0, "logs": odd})
    assert set(store.history(0)) == {"loss", "nan"}
    assert store.history(0)["loss"] == [0.5]


def test_the_protocol_modules_import_only_the_standard_library():
    """What both processes import: the standard library, and each other (relative, one
    level: inside protocol/)."""
    folder = os.path.dirname(events.__file__)
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(folder, name)) as source:
            tree = ast.parse(source.read())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.level == 0}
        assert imported <= set(sys.stdlib_module_names) | {"__future__"}, (name, imported)
        assert all(node.level <= 1 for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom)), name


def test_the_notebook_side_does_not_import_the_worker_side():
    code = ("import sys, tfmw_notebook.widgets.live;"
            "print('tfmw_notebook.worker.liveness.reporting' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


class CountingData(dict):
    """An engine's published data that counts how often all its keys were listed."""

    listed = 0

    def __iter__(self):
        self.listed += 1
        return super().__iter__()


def test_the_reader_takes_new_keys_poll_after_poll_without_listing_every_key():
    data, reader = CountingData(), EventReader()
    data["tfmw-alive"] = 1                      # the heartbeat's key, seen once
    data[events_key(1)] = [{"n": 1}]
    assert reader.read(data) == [{"n": 1}] and data.listed == 1
    for seq in range(2, 40):
        data[events_key(seq)] = [{"n": seq}, {"n": seq}]
        data["tfmw-alive"] = seq                # updated in place: no new key
        assert reader.read(data) == [{"n": seq}, {"n": seq}]
        assert reader.read(data) == []
    assert data.listed == 1 and reader.seq == 39


def test_the_reader_gets_past_a_lost_publish_and_keys_that_are_not_its_own():
    data, reader = {events_key(1): [{"n": 1}]}, EventReader()
    assert reader.read(data) == [{"n": 1}]
    data[events_key(3)] = [{"n": 3}]            # seq 2 never arrived
    data["user-key"] = [{"n": -1}]
    assert reader.read(data) == [{"n": 3}]
    data[events_key(4)] = [{"n": 4}]
    assert reader.read(data) == [{"n": 4}] and reader.seq == 4
    assert reader.read(None) == [] and reader.read({}) == []


def test_a_key_that_arrives_while_the_reader_looks_is_read_on_that_poll_or_the_next():
    class ArrivingData(dict):
        """The client's thread adds a key after the reader's first lookup."""

        def __contains__(self, key):
            if key == events_key(2) and events_key(5) not in self:
                dict.__setitem__(self, events_key(5), [{"n": 5}])
            return dict.__contains__(self, key)

    data, reader = ArrivingData({events_key(1): [{"n": 1}]}), EventReader()
    assert [e["n"] for e in reader.read(data) + reader.read(data)] == [1, 5]
