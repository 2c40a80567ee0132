"""The pure parts behind `%%tfdist --shard`: the row split, the shared file, a worker's
rows put back together (in this process, from the same file or the same sender the
engines use), and the one-line refusals."""

from __future__ import annotations

import os
import subprocess
import tempfile

import numpy as np
import pandas as pd
import pytest
from tfmw_notebook.cluster.data import shared_file
from tfmw_notebook.cluster.data.sender import Sender
from tfmw_notebook.cluster.data.shard_sets import ShardSet, ShardSets
from tfmw_notebook.cluster.data.split import take_apart
from tfmw_notebook.errors import BadArgument
from tfmw_notebook.protocol.shard_layout import chunk_bounds
from tfmw_notebook.protocol.tfconfig import EngineReport
from tfmw_notebook.worker.data import shards

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


@pytest.mark.parametrize("rows", [0, 1, 2, 5, 7, 10, 11, 64, 1001])
@pytest.mark.parametrize("workers", [1, 2, 3, 4, 7])
def test_chunks_have_array_splits_sizes_in_order(rows, workers):
    bounds = chunk_bounds(rows, workers)
    expected = [len(part) for part in np.array_split(np.arange(rows), workers)]
    assert [stop - start for start, stop in bounds] == expected
    assert bounds[0][0] == 0 and bounds[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))


def _frame(rows: int = 11) -> pd.DataFrame:
    return pd.DataFrame({
        "f32": np.linspace(0, 1, rows, dtype=np.float32),
        "i64": np.arange(rows, dtype=np.int64) * 3,
        "text": [f"row {i}" for i in range(rows)],
        "when": pd.date_range("2026-01-01", periods=rows, freq="h"),
        "kind": pd.Categorical(["a", "b", "c"] * (rows // 3) + ["a"] * (rows % 3)),
    }, index=pd.Index(np.arange(100, 100 + rows), name="id"))


def _values() -> dict:
    frame = _frame()
    return {
        "x": np.arange(11 * 4, dtype=np.float32).reshape(11, 2, 2),
        "frame": frame,
        "labels": pd.Series(np.arange(11) % 2, name="label"),
        "nested": {"a": (np.arange(11), [np.ones((11, 3))]), "b": frame[["f32"]]},
        "objects": np.array([{"n": i} for i in range(11)], dtype=object),
    }


def _rows_of(shard_set: ShardSet, workers: int, via: str) -> list[dict]:
    """Each rank's values, built as a worker builds them, read from the file or a sender."""
    reports = [EngineReport(i, "host", "127.0.0.1", 0, 0) for i in range(workers)]
    sender = Sender(shard_set.path, shard_set.blocks) if via == "stream" else None
    try:
        source = sender.source(("127.0.0.1",)) if sender is not None else None
        tickets = shard_set.tickets(reports, [via == "file"] * workers, source)
        built = []
        for ticket in tickets:
            arrays = shards._mapped(ticket) if via == "file" else shards._streamed(ticket)
            built.append({name: shards.build(recipe, arrays, ticket)
                          for name, recipe in ticket.recipes.items()})
        return built
    finally:
        if sender is not None:
            sender.close()


def _check_rank(got: dict, values: dict, start: int, stop: int) -> None:
    np.testing.assert_array_equal(got["x"], values["x"][start:stop])
    assert got["x"].dtype == np.float32 and got["x"].shape[1:] == (2, 2)
    pd.testing.assert_frame_equal(got["frame"], values["frame"].iloc[start:stop])
    pd.testing.assert_series_equal(got["labels"], values["labels"].iloc[start:stop])
    np.testing.assert_array_equal(got["nested"]["a"][0], np.arange(11)[start:stop])
    assert isinstance(got["nested"]["a"], tuple) and isinstance(got["nested"]["a"][1], list)
    np.testing.assert_array_equal(got["nested"]["a"][1][0], np.ones((stop - start, 3)))
    pd.testing.assert_frame_equal(got["nested"]["b"], values["nested"]["b"].iloc[start:stop])
    assert [d["n"] for d in got["objects"]] == list(range(start, stop))


@pytest.mark.parametrize("via", ["file", "stream"])
@pytest.mark.parametrize("workers", [2, 3])
def test_each_rank_gets_its_rows_of_every_value(workers, via):
    values = _values()
    sets = ShardSets()
    shard_set = sets.make(values)
    try:
        built = _rows_of(shard_set, workers, via)
        for (start, stop), got in zip(chunk_bounds(11, workers), built):
            _check_rank(got, values, start, stop)
        assert sum(len(got["x"]) for got in built) == 11
    finally:
        shared_file.remove(shard_set.path)


def test_mapped_rows_are_copy_on_write():
    values = {"x": np.arange(10.0)}
    shard_set = ShardSets().make(values)
    try:
        first = _rows_of(shard_set, 2, "file")[0]["x"]
        first[0] = -1.0                     # the worker's own page, not the file's
        again = _rows_of(shard_set, 2, "file")[0]["x"]
        assert again[0] == 0.0 and values["x"][0] == 0.0
    finally:
        shared_file.remove(shard_set.path)


def test_a_set_is_freed_when_every_name_it_holds_is_sharded_anew():
    sets = ShardSets()
    first = sets.make({"x": np.arange(4), "y": np.arange(4)})
    sets.hold(first)
    second = sets.make({"x": np.arange(6)})
    sets.hold(second)
    assert os.path.exists(first.path)       # y still refers to it
    third = sets.make({"y": np.arange(6)})
    sets.hold(third)
    assert not os.path.exists(first.path)
    assert sets.rows_held() == {"x": 6, "y": 6}
    sets.close()
    assert not os.path.exists(second.path) and not os.path.exists(third.path)


def test_a_dead_kernels_file_is_removed_by_the_next():
    directory = tempfile.mkdtemp()
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = os.path.join(directory, f"tfmw-shard-{dead.pid}-abc")
    mine = os.path.join(directory, f"tfmw-shard-{os.getpid()}-abc")
    for path in (orphan, mine):
        open(path, "wb").close()
    shared_file.create(take_apart({"x": np.arange(3)}), "--shard x", directory)
    assert not os.path.exists(orphan) and os.path.exists(mine)


@pytest.mark.parametrize("values, message", [
    ({"g": (i for i in range(3))}, "--shard g: a generator cannot be split by rows; shard "
                                   "NumPy arrays, pandas DataFrames or Series (or tuples, "
                                   "lists or dicts of them) (a generator or iterator is read "
                                   "once: make a list or array of it first)"),
    ({"n": 5}, "--shard n: a int cannot be split by rows"),
    ({"s": np.float32(2.0)}, "--shard s: a numpy.float32 cannot be split by rows"),
    ({"z": np.array(3.0)}, "--shard z: a 0-dimensional array has no rows to split; push it "
                           "with --push instead"),
    ({"numbers": [1, 2, 3]}, "--shard numbers: a list of 3 items is not split item by item; "
                             "make it an array first (numbers = np.asarray(numbers))"),
    ({"empty": {}}, "--shard empty: a dict with no array in it has no rows to split"),
    ({"pair": (np.zeros(3), np.zeros(4))},
     "--shard pair: its parts have different numbers of rows (3, 4); shard values of one "
     "length"),
    ({"x": np.zeros(3), "y": np.zeros(5)},
     "--shard: the values are split by rows together, so they need the same number of rows "
     "(x has 3, y has 5); shard them in separate cells"),
])
def test_values_that_cannot_be_sharded_are_refused_in_one_line(values, message):
    with pytest.raises(BadArgument) as refused:
        take_apart(values)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_more_than_the_shared_memory_left_is_refused_before_copying(small_shared_memory):
    big = {"x": np.zeros((8, 1 << 16), np.float32)}   # 2 MiB of arrays, in 1 MiB
    with pytest.raises(BadArgument) as refused:
        shared_file.create(take_apart(big), "--shard x", small_shared_memory)
    message = str(refused.value)
    assert message.startswith("--shard x: 2.0 MiB of arrays do not fit in the shared memory "
                              "left (")
    assert f"free in {small_shared_memory}); shard fewer rows" in message
    assert os.listdir(small_shared_memory) == []
    path, _ = shared_file.create(take_apart({"x": np.zeros(1000)}), "--shard x",
                                 small_shared_memory)
    assert os.path.dirname(path) == small_shared_memory


def test_a_large_push_is_a_set_every_worker_takes_whole():
    from tfmw_notebook.cluster.data.shard_sets import LARGE_PUSH_BYTES, large_values

    big = np.zeros(LARGE_PUSH_BYTES // 8, np.float64)
    values = {"big": big, "small": np.zeros(10), "objects": np.array([None] * 10),
              "settings": {"lr": 0.1}, "scalar": np.zeros(())}
    assert list(large_values(values)) == ["big"]
    shard_set = ShardSets().make({"x": np.arange(7.0)}, whole=True)
    try:
        built = _rows_of(shard_set, 3, "file")
        assert [list(got["x"]) for got in built] == [list(np.arange(7.0))] * 3
    finally:
        shared_file.remove(shard_set.path)


def test_a_stream_longer_than_a_second_says_how_far_it_has_come(monkeypatch, capsys):
    from tfmw_notebook.cluster.data import shard_sets

    now = [100.0]
    monkeypatch.setattr(shard_sets.time, "monotonic", lambda: now[0])
    progress = shard_sets._Progress(total=4 << 20)
    progress.add(1 << 20)                      # within the first second: quiet
    assert capsys.readouterr().out == ""
    now[0] += 1.5
    progress.add(1 << 20)
    now[0] += 0.5
    progress.add(1 << 20)                      # less than a second since the last line
    now[0] += 1.0
    progress.add(1 << 20)
    progress.finish()
    lines = capsys.readouterr().out.split("\r")[1:]
    assert lines == ["tfdist: sending shards to other hosts: 50% (2 MiB)",
                     "tfdist: sending shards to other hosts: 100% (4 MiB)\n"]
