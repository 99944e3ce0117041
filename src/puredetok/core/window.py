"""The generic fallback: the engines' window-difference algorithm, made safe.

For a decoder puredetok has no exact model of, the text is found by calling the tokenizer's own
``decode`` on a short window of ids and emitting what the window adds beyond its context:

* trailing U+FFFD are held (they may be an incomplete character), and nothing else is: every script
  streams as soon as it is decoded, with no "wait for a space" rule;
* ids that decode to nothing, alone and repeated, never enter the window (so a stream of them
  costs O(1) per token);
* the window is bounded: when ``limit`` ids are pending, the longest pending prefix whose decode is
  a prefix of the window's decode is committed, held U+FFFD included (a literal "�" token stream
  still streams, in bursts), and the window moves on;
* ``finish`` emits everything.

Exact (G1, G2, G4) for decoders whose output only grows as ids are appended (byte-level BPE,
WordPiece); for others the mismatch rate is measured in the docs.
"""

from __future__ import annotations

__all__ = ["Window"]

from collections.abc import Callable, Sequence

import attrs

Hold = tuple[tuple[int, ...], tuple[int, ...], int, int]
"""``(context ids, pending ids, len(decode(context)), characters of the pending text sent)``"""

_CONTEXT = 4


def _trailing_replacements(text: str, floor: int) -> int:
    n = len(text)
    while n > floor and text[n - 1] == "\ufffd":
        n -= 1
    return len(text) - n


@attrs.frozen(eq=False)
class Window:
    """The window-difference model (implements :class:`puredetok.core.codec.Decoding`)."""

    decode: Callable[[list[int]], str] = attrs.field(repr=False)
    """The tokenizer's own decode, with the codec's options bound."""
    silent: frozenset[int] = attrs.field(repr=False)
    """Ids that decode to "" alone and twice over; they never enter the window."""
    limit: int = 16
    initial: Hold = ((), (), 0, 0)
    idle: None = None
    """Never a hold of this model: every step decodes."""
    fast: tuple[str | None, ...] = ()

    def _commit(self, ids: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        context = ids[-_CONTEXT:]
        return context, len(self.decode(list(context)))

    def step(self, hold: Hold, token_id: int) -> tuple[Hold, str]:
        """Decode the window with one more id and emit what became certain."""
        if token_id in self.silent:
            return hold, ""
        context, pending, base, sent = hold
        pending = (*pending, token_id)
        text = self.decode([*context, *pending])[base:]
        certain = len(text) - _trailing_replacements(text, sent)
        delta = text[sent:certain] if certain > sent else ""
        sent = max(sent, certain)
        if certain == len(text):
            context, base = self._commit(context + pending)
            return (context, (), base, 0), delta
        if len(pending) < self.limit:
            return (context, pending, base, sent), delta
        return self._force(context, pending, base, sent, text, delta)

    def _force(
        self, context: tuple[int, ...], pending: tuple[int, ...], base: int, sent: int, text: str, delta: str
    ) -> tuple[Hold, str]:
        for cut in range(len(pending) - 1, 0, -1):
            stable = self.decode([*context, *pending[:cut]])[base:]
            if text.startswith(stable) and stable:
                break
        else:
            cut, stable = len(pending), text
        if len(stable) > sent:
            delta += text[sent : len(stable)]
            sent = len(stable)
        new_context, new_base = self._commit(context + pending[:cut])
        return (new_context, pending[cut:], new_base, sent - len(stable)), delta

    def feed(self, hold: Hold, token_ids: Sequence[int]) -> tuple[Hold, str]:
        """Step through the ids."""
        out = []
        for token_id in token_ids:
            hold, text = self.step(hold, token_id)
            out.append(text)
        return hold, "".join(out)

    def finish(self, hold: Hold) -> str:
        """Everything not yet sent."""
        context, pending, base, sent = hold
        if not pending:
            return ""
        return self.decode([*context, *pending])[base + sent :]
