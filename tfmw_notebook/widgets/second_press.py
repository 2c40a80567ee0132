"""A button that deletes asks twice: the first press says what would go, the second deletes.

A click lands by mistake easily and a deletion cannot be undone. The second press counts
only for the same target, with no other button pressed and nothing else selected between
the two (the owner calls `disarm()` then).
"""

from __future__ import annotations

from collections.abc import Hashable

import ipywidgets as widgets


class SecondPress:
    """Guards `button`: `confirmed(target)` is True only on its second press for `target`."""

    def __init__(self, button: widgets.Button, armed_label: str):
        self.button = button
        self._label = button.description
        self._armed_label = armed_label
        self._target: Hashable | None = None

    @property
    def armed_label(self) -> str:
        return self._armed_label

    def confirmed(self, target: Hashable) -> bool:
        """The first press arms the button for `target` (its label asks to confirm) and
        returns False; a second press for the same target returns True."""
        if self._target is not None and self._target == target:
            self.disarm()
            return True
        self._target = target
        self.button.description = self._armed_label
        return False

    def disarm(self) -> None:
        self._target = None
        self.button.description = self._label
