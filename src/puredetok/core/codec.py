"""``puredetok.core.codec.SavedState``, as older pickles of states name it (see :mod:`puredetok.core`)."""

from __future__ import annotations

__all__ = ["SavedState"]

from puredetok._core import SavedState
