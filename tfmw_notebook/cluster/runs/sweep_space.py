"""What a sweep tries: its dimensions, checked, and the trials they make (grid or sampled).

Pure. A dimension is a list of values (`lr=1e-3,1e-2`) or a distribution
(`lr=loguniform:1e-4:1e-1`, `uniform:A:B`). Listed values are typed as a whole: int
when every one is a whole number, else float when every one is a number, else bool
when every one is True or False, else str (numbers mixed with words is taken for a
typo and refused). Lists alone make a grid: every combination, in the order given
(the last name varies fastest). With distributions, `trials` combinations are sampled,
a listed dimension then being sampled uniformly from its values; the same seed gives
the same trials. Every error is a one-line ValueError that says how to fix it.
"""

from __future__ import annotations

import itertools
import keyword
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DISTRIBUTIONS = ("uniform", "loguniform")
MAX_GRID = 10_000   # more combinations is a typo, not a sweep one can wait for
WORKER_NAMES = ("tf", "strategy", "tfdist")   # what every cell on the workers relies on


@dataclass(frozen=True)
class Choice:
    name: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Distribution:
    name: str
    kind: str       # one of DISTRIBUTIONS
    low: float
    high: float

    def draw(self, rng: random.Random) -> float:
        if self.kind == "loguniform":
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)


Dimension = Choice | Distribution


def parse_dimension(text: str) -> Dimension:
    """`NAME=V1,V2,...` or `NAME=uniform:LOW:HIGH` / `NAME=loguniform:LOW:HIGH`."""
    name, equals, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    if not equals or not name:
        raise ValueError(f"--sweep {text!r}: write NAME=V1,V2,... or "
                         "NAME=loguniform:LOW:HIGH (e.g. lr=1e-3,1e-2)")
    _check_name(name)
    if not spec:
        raise ValueError(f"--sweep {name}=: no values; write {name}=V1,V2,...")
    kind, colon, bounds = spec.partition(":")
    if colon:
        return _distribution(name, kind.strip().lower(), bounds)
    return Choice(name, typed_values(name, spec.split(",")))


def _check_name(name: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"--sweep {name}=...: {name!r} is not a Python name the cell could "
                         "use; write letters, digits and _ (not first a digit)")
    if name in WORKER_NAMES:
        raise ValueError(f"--sweep {name}=...: {name!r} would replace the workers' own "
                         f"`{name}`; choose another name")


def typed_values(name: str, texts: Sequence[str]) -> tuple[Any, ...]:
    """The listed values, typed as a whole (see the module's docstring)."""
    texts = [text.strip() for text in texts]
    if any(not text for text in texts):
        raise ValueError(f"--sweep {name}={','.join(texts)}: an empty value; "
                         "separate values with single commas")
    for convert in (int, float):
        converted = _all(convert, texts)
        if converted is not None:
            return converted
    if all(text in ("True", "False") for text in texts):
        return tuple(text == "True" for text in texts)
    numbers = [text for text in texts if _all(float, [text]) is not None]
    if numbers:
        words = [text for text in texts if text not in numbers]
        raise ValueError(f"--sweep {name}=...: {words[0]!r} is not a number like "
                         f"{numbers[0]!r}; give numbers only, or words only")
    return tuple(texts)


def _all(convert, texts: Sequence[str]) -> tuple[Any, ...] | None:
    try:
        return tuple(convert(text) for text in texts)
    except ValueError:
        return None


def _distribution(name: str, kind: str, bounds: str) -> Distribution:
    usage = f"write {name}=loguniform:LOW:HIGH or {name}=uniform:LOW:HIGH"
    if kind not in DISTRIBUTIONS:
        raise ValueError(f"--sweep {name}={kind}:{bounds}: unknown distribution {kind!r}; "
                         f"{usage}")
    parts = bounds.split(":")
    numbers = _all(float, parts) if len(parts) == 2 else None
    if numbers is None or not all(math.isfinite(n) for n in numbers):
        raise ValueError(f"--sweep {name}={kind}:{bounds}: expected two finite numbers "
                         f"LOW:HIGH; {usage}")
    low, high = numbers
    if low >= high:
        raise ValueError(f"--sweep {name}={kind}:{bounds}: LOW must be below HIGH")
    if kind == "loguniform" and low <= 0:
        raise ValueError(f"--sweep {name}={kind}:{bounds}: loguniform needs LOW > 0 "
                         "(its logarithm is sampled); use uniform for 0 or below")
    return Distribution(name, kind, low, high)


def dimensions(space: Sequence[str] | Mapping[str, Any]) -> tuple[Dimension, ...]:
    """The dimensions of `--sweep` texts, or of an API mapping {name: [values] or
    "loguniform:LOW:HIGH"}; names must differ."""
    if isinstance(space, Mapping):
        dims = tuple(_from_mapping(name, value) for name, value in space.items())
    else:
        dims = tuple(parse_dimension(text) for text in space)
    if not dims:
        raise ValueError("a sweep needs at least one dimension, e.g. --sweep lr=1e-3,1e-2")
    seen: set[str] = set()
    for dim in dims:
        if dim.name in seen:
            raise ValueError(f"--sweep {dim.name}: given twice; list all its values in one "
                             f"--sweep {dim.name}=V1,V2,...")
        seen.add(dim.name)
    return dims


def _from_mapping(name: Any, value: Any) -> Dimension:
    if not isinstance(name, str):
        raise ValueError(f"sweep name {name!r}: names are strings")
    _check_name(name)
    if isinstance(value, str):
        if ":" not in value:
            raise ValueError(f"sweep {name}={value!r}: a string is a distribution "
                             f"('loguniform:LOW:HIGH'); give listed values as a list")
        return parse_dimension(f"{name}={value}")
    if isinstance(value, (Choice, Distribution)):
        return value
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"sweep {name}={value!r}: give a non-empty list of values or "
                         "'loguniform:LOW:HIGH'")
    return Choice(name, tuple(value))


def plan(dims: Sequence[Dimension], *, trials: int | None = None,
         seed: int | None = None) -> list[dict[str, Any]]:
    """The trials' values: the grid of listed dimensions, or `trials` samples drawn with
    `seed` (needed then: the caller picks one when the user did not)."""
    sampled = any(isinstance(dim, Distribution) for dim in dims)
    if trials is None:
        if seed is not None:
            raise ValueError(f"--seed {seed}: it seeds --trials sampling; a grid (no "
                             "--trials) runs every combination: drop --seed")
        if sampled:
            names = ", ".join(dim.name for dim in dims if isinstance(dim, Distribution))
            raise ValueError(f"--sweep {names}: a distribution needs --trials K (how many "
                             "combinations to sample)")
        return grid(dims)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"--trials {trials!r}: expected a whole number >= 1")
    if not sampled:
        raise ValueError("--trials samples from distributions (lr=loguniform:1e-4:1e-1); "
                         "with listed values only, drop --trials: the grid runs every "
                         "combination")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"--seed {seed!r}: expected a whole number")
    return sample(dims, trials, seed)


def grid(dims: Sequence[Dimension]) -> list[dict[str, Any]]:
    choices = [dim for dim in dims if isinstance(dim, Choice)]
    size = math.prod(len(dim.values) for dim in choices)
    if size > MAX_GRID:
        raise ValueError(f"the grid has {size} combinations (more than {MAX_GRID}); "
                         "list fewer values")
    return [dict(zip([dim.name for dim in choices], combination))
            for combination in itertools.product(*(dim.values for dim in choices))]


def sample(dims: Sequence[Dimension], trials: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{dim.name: dim.draw(rng) if isinstance(dim, Distribution)
             else rng.choice(dim.values) for dim in dims} for _ in range(trials)]


def describe(dim: Dimension) -> str:
    if isinstance(dim, Distribution):
        return f"{dim.name}={dim.kind}:{dim.low:g}:{dim.high:g}"
    return f"{dim.name}=" + ",".join(str(value) for value in dim.values)
