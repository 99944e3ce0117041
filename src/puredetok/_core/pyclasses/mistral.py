"""The one stage of ``transformers``' ``MistralCommonBackend`` of its own: with
``skip_special_tokens``, a leading ``lang:xx`` (two ASCII lowercase letters: Voxtral's language tag)
removed from the whole text. How Mistral's tokenizers decode, and how they are read, is
:mod:`puredetok._build.pyclasses.mistral`'s.
"""

from __future__ import annotations

from typing import Any

import attrs

from puredetok._core.decoders.base import MISS, Lanes, OneAtATime, Piece

_LANG = "lang:"
_TAG = len(_LANG) + 2


@attrs.frozen
class LangTagStage(OneAtATime):
    """``MistralCommonBackend``'s removal of a leading ``lang:xx`` (``re.sub(r"^lang:[a-z]{2}", "")``
    on the whole text): the hold is the text so far while it may still be the tag, None after.
    """

    initial: str | None = ""
    idle: str | None = None

    def push(self, hold: str | None, value: str, glued: bool) -> tuple[str | None, list[Piece]]:
        """Text passes once the start is decided; until then it is held while it may be the tag."""
        if hold is None:
            return None, ([(value, glued)] if value else [])
        text = hold + value
        if len(text) >= _TAG:
            if _may_be_tag(text[:_TAG]):
                text = text[_TAG:]
            return None, ([(text, True)] if text else [])
        if _may_be_tag(text):
            return text, []
        return None, [(text, True)]

    def push_lanes(self, hold: str | None, values: list[Any], glued: bool) -> Lanes | None:
        """Once the start is decided, every non-empty text passes as it is."""
        if hold is not None:
            return None
        return [value if value else MISS for value in values], None, glued

    def settle(self, tail: Any, solid: bool) -> tuple[Any, bool] | None:
        """Text as long as the tag, or with a character no tag has, decides the start: nothing is
        held after it. What is released ends with that text past the tag's length (a tag may have
        been cut from the start), glued or not empty.
        """
        if type(tail) is not str or (len(tail) < _TAG and all("a" <= c <= "z" or c == ":" for c in tail)):
            return None
        return tail[_TAG:], True

    def flush(self, hold: str | None) -> list[Piece]:
        """A text shorter than the tag is kept."""
        return [(hold, True)] if hold else []

    def is_hold(self, hold: object) -> bool:
        """None, or a start of text (at most 6 characters) that may still be the tag."""
        return hold is None or (type(hold) is str and len(hold) < _TAG and _may_be_tag(hold))


def _may_be_tag(text: str) -> bool:
    """Whether ``text`` (at most 7 characters) is the start of ``lang:`` and two letters a-z."""
    return _LANG.startswith(text[: len(_LANG)]) and all("a" <= c <= "z" for c in text[len(_LANG) :])
