"""The package's own warning category, for either process (tests turn it into errors)."""

from __future__ import annotations


class TFDistWarning(UserWarning):
    """Something the user should know that does not stop the work (e.g. arguments
    a call ignored); shown once, in one line that says what to do instead."""
