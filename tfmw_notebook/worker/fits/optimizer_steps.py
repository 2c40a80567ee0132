"""How far a model's training went: its optimizer's step count."""

from __future__ import annotations

from typing import Any


def optimizer_steps(model: Any) -> int:
    """The optimizer's step count now (0 where it has none yet: not compiled, not built)."""
    iterations = getattr(getattr(model, "optimizer", None), "iterations", None)
    try:
        return int(iterations.numpy()) if iterations is not None else 0
    except (AttributeError, TypeError, ValueError):
        return 0
