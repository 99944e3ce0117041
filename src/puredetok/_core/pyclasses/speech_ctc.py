"""The one stage of ``Wav2Vec2CTCTokenizer``'s own (with ``do_lower_case``): lower case, piece by
piece. Its grouping and strip are :mod:`puredetok._core.decoders.ctc`'s and
:mod:`puredetok._core.decoders.whitespace`'s; how the class decodes is read by
:mod:`puredetok._build.pyclasses.speech_ctc`.
"""

from __future__ import annotations

import attrs

from puredetok._core.decoders.base import OneAtATime, Piece


@attrs.frozen
class LowerStage(OneAtATime):
    """``str.lower`` piece by piece (equal to lower-casing the whole text when no capital sigma,
    whose lower case depends on the next letter, can occur).
    """

    initial: None = None
    idle: None = None

    def push(self, hold: None, value: str, glued: bool) -> tuple[None, list[Piece]]:
        """Lower-case the piece."""
        return None, [(value.lower(), glued)]

    def flush(self, hold: None) -> list[Piece]:
        """Nothing is held."""
        return []

    def is_hold(self, hold: object) -> bool:
        """Always None."""
        return hold is None
