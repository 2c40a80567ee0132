"""Taking notebook values apart into row-indexed parts for `--shard` (no I/O here).

What can be sharded: NumPy arrays (one row per first-axis entry), pandas DataFrames and
Series, and tuples, lists or dicts of them, nested. Arrays of plain dtypes (numbers,
booleans, dates, fixed-width strings) are shared as bytes; what is not (object dtypes,
pandas' extension types, an index that is not a range) travels as each worker's own rows,
pickled. Every value of a set must have the same number of rows: rows are examples, and
worker r's rows of `x` must be the labels of its rows of `y`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import BadArgument

_CONTAINERS = (tuple, list, dict)


@dataclass
class Parts:
    """A shard set taken apart: a recipe per name, the arrays shared as bytes (`arrays[i]`
    is block i) and the row-sliceable rest (`others[i]` is part i)."""

    recipes: dict[str, Any] = field(default_factory=dict)
    arrays: list[Any] = field(default_factory=list)
    others: list[Any] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)   # name -> its number of rows


def take_apart(values: dict[str, Any]) -> Parts:
    """The parts of every named value; BadArgument naming the first value that cannot be
    sharded, or the lengths when they differ."""
    parts = Parts()
    for name, value in values.items():
        lengths: list[int] = []
        parts.recipes[name] = _recipe(name, value, parts, lengths)
        if not lengths:
            raise BadArgument(f"--shard {name}: {_kind(value)} with no array in it has no "
                              "rows to split; shard arrays, DataFrames or Series")
        if len(set(lengths)) > 1:
            raise BadArgument(f"--shard {name}: its parts have different numbers of rows "
                              f"({', '.join(map(str, lengths))}); shard values of one length")
        parts.rows[name] = lengths[0]
    if len(set(parts.rows.values())) > 1:
        sizes = ", ".join(f"{name} has {rows}" for name, rows in parts.rows.items())
        raise BadArgument(f"--shard: the values are split by rows together, so they need the "
                          f"same number of rows ({sizes}); shard them in separate cells")
    return parts


def _recipe(name: str, value: Any, parts: Parts, lengths: list[int]) -> Any:
    np, pd = _numpy(), _pandas()
    if np is not None and isinstance(value, np.ndarray):
        return _array(name, value, parts, lengths)
    if pd is not None and isinstance(value, pd.DataFrame):
        lengths.append(len(value))
        columns = tuple(_column(value.iloc[:, i], parts) for i in range(value.shape[1]))
        return ("frame", value.columns, columns, _index(value.index, parts))
    if pd is not None and isinstance(value, pd.Series):
        lengths.append(len(value))
        return ("series", _column(value, parts), _index(value.index, parts), value.name)
    if isinstance(value, dict):
        keys = tuple(value)
        return ("dict", keys, tuple(_recipe(name, value[k], parts, lengths) for k in keys))
    if isinstance(value, (tuple, list)):
        if value and not any(isinstance(item, (*_CONTAINERS, np.ndarray)) or _is_pandas(item)
                             for item in value):
            raise BadArgument(f"--shard {name}: {_kind(value)} of {len(value)} items is not "
                              f"split item by item; make it an array first "
                              f"({name} = np.asarray({name}))")
        kind = "tuple" if isinstance(value, tuple) else "list"
        return (kind, tuple(_recipe(name, item, parts, lengths) for item in value))
    raise BadArgument(f"--shard {name}: {_kind(value)} cannot be split by rows; shard NumPy "
                      "arrays, pandas DataFrames or Series (or tuples, lists or dicts of them)"
                      + _hint(value))


def _array(name: str, array, parts: Parts, lengths: list[int]) -> Any:
    if array.ndim == 0:
        raise BadArgument(f"--shard {name}: a 0-dimensional array has no rows to split; "
                          "push it with --push instead")
    lengths.append(array.shape[0])
    if array.dtype.hasobject:
        parts.others.append(array)
        return ("part", len(parts.others) - 1)
    parts.arrays.append(array)
    return ("block", len(parts.arrays) - 1)


def _column(series, parts: Parts) -> Any:
    """A column's (or a Series') values: bytes when NumPy holds them plainly."""
    np = _numpy()
    if isinstance(series.dtype, np.dtype) and not series.dtype.hasobject:
        parts.arrays.append(series.to_numpy())
        return ("block", len(parts.arrays) - 1)
    parts.others.append(series.array)   # an ExtensionArray or object values, sliced by rows
    return ("part", len(parts.others) - 1)


def _index(index, parts: Parts) -> Any:
    pd = _pandas()
    if isinstance(index, pd.RangeIndex):
        return ("range", index.start, index.step, index.name)
    parts.others.append(index)
    return ("part", len(parts.others) - 1)


def _is_pandas(value: Any) -> bool:
    return type(value).__module__.startswith("pandas")


def _hint(value: Any) -> str:
    if hasattr(value, "__next__") or type(value).__name__ == "generator":
        return " (a generator or iterator is read once: make a list or array of it first)"
    if type(value).__module__.startswith("tensorflow"):
        return " (a tf.data pipeline or tensor: shard the arrays it is made from)"
    return ""


def _kind(value: Any) -> str:
    return f"a {type(value).__module__}.{type(value).__qualname__}".replace("builtins.", "")


def _numpy():
    import numpy

    return numpy


def _pandas():
    try:
        import pandas
    except ImportError:   # pandas is not required: arrays only
        return None
    return pandas
