"""Which Keras every contender of a round runs: 3 (as TensorFlow ships it) or 2 (tf-keras).

One setting for the whole process, changed between rounds by `--keras both`; the floor's
processes and tfmw's workers read it when they start.
"""

from __future__ import annotations

current = 3


def legacy_flag() -> str:
    """TF_USE_LEGACY_KERAS for the current Keras."""
    return "1" if current == 2 else "0"


def name() -> str:
    return "Keras 3" if current == 3 else "tf-keras"
