"""Other engines' streaming algorithms, for comparison (benchmarks, conformance examples).

These are *not* puredetok: they are the heuristics the SPEC's field cases are about, written here
so they can be measured and tested side by side with the core.
"""

from __future__ import annotations

__all__ = ["TwoWindow", "two_window_stream", "per_token_stream"]

from collections.abc import Callable, Iterable, Iterator

import attrs

Decode = Callable[[list[int]], str]


@attrs.define
class TwoWindow:
    """The common engine algorithm (vLLM's ``detokenize_incrementally``, SGLang's detokenizer).

    Each step decodes ``ids[prefix:read]`` and ``ids[prefix:]`` and emits the difference, unless
    the new text ends in U+FFFD; it has no final flush, so an incomplete tail is lost.
    """

    decode: Decode
    ids: list[int] = attrs.field(factory=list)
    prefix_offset: int = 0
    read_offset: int = 0

    def step(self, token_id: int) -> str:
        """Append one id and return the engine's delta."""
        self.ids.append(token_id)
        prefix_text = self.decode(self.ids[self.prefix_offset : self.read_offset])
        new_text = self.decode(self.ids[self.prefix_offset :])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return new_text[len(prefix_text) :]
        return ""


def two_window_stream(decode: Decode, ids: Iterable[int]) -> Iterator[str]:
    """Deltas of the two-window algorithm over ``ids``."""
    window = TwoWindow(decode)
    for token_id in ids:
        yield window.step(token_id)


def per_token_stream(decode: Decode, ids: Iterable[int]) -> Iterator[str]:
    """The naive algorithm: decode every id on its own."""
    for token_id in ids:
        yield decode([token_id])
