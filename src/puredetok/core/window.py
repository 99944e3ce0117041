"""The generic fallback: streaming for a decoder puredetok has no exact model of, by calling the
tokenizer's own ``decode`` on a bounded window of ids, and sending only text it has checked.

What "certain" means here. For an arbitrary ``decode`` nothing about the future is known, so the
fallback asks it: text is sent only once it is a common prefix of ``decode(window)`` and of
``decode(window + probe)`` for a fixed set of probes, chosen when the codec is built to stand for
the ways a next token changes text: a word (shows trailing whitespace a strip would remove), a
punctuation mark (space cleanup), whitespace, a byte or partial character (incomplete UTF-8, byte
runs that a later byte spoils), an id that decodes to nothing, an added or special token, a digit.
So a text that any of those would change is held, never sent early and then contradicted. A
trailing U+FFFD is held too: it may be a character that several more bytes complete.

How the window stays bounded without losing text.

* Ids are never dropped from the window: an id that decodes to nothing alone may still matter
  next to others (a lone UTF-8 lead byte in ByT5, a CTC pad between repeats).
* The window is ``context + pending``. Its decode is compared beyond ``base``, the length of the
  context's own text, which is already sent and certain.
* A step only appends the id to ``pending``; every ``every`` ids (``ATTEMPT``) the window is decoded
  with the probes and the certain text is sent. When all of the pending text is certain, the
  pending ids join the context (nothing to recompute: ``base`` becomes the window's text length).
* When the context grows past ``TRIM`` ids it is cut to its last ``KEEP`` ids behind an anchor id
  (an id with plain text, so that a decoder's start-of-text rules, such as dropping a leading
  space, apply to the anchor and not to the kept ids), or to those ids alone, or to nothing (for a
  decoder that drops what came first). A cut is made only if the shorter window decodes every
  probe continuation exactly as the longer one did; otherwise the context keeps growing, up to
  ``LIMIT`` ids.
* ``finish`` sends the window's text that is still held, so the stream's text equals ``decode``.

The bound this leaves (documented in the guarantees): the fallback is prefix-safe against the
changes its probes show, and exact as long as text stays uncertain for fewer than ``LIMIT`` ids and
the decoder looks back no further than its context. Beyond ``LIMIT`` pending ids (say a run of
whitespace tokens longer than that before a strip), the oldest text is sent as it stands.
"""

from __future__ import annotations

__all__ = ["Window", "build_window", "ATTEMPT", "KEEP", "TRIM", "LIMIT"]

import os
from collections.abc import Callable, Collection, Sequence

import attrs

ATTEMPT = 16
"""Pending ids between two decodes of the window."""
KEEP = 6
"""Ids of context kept (behind the anchor) when the context is cut."""
TRIM = 24
"""Context length from which a cut is tried."""
LIMIT = 96
"""The most ids the window holds; past it the context is cut, and pending text sent, unchecked."""

Hold = tuple[tuple[int, ...], int, tuple[int, ...], int]
"""``(context ids, len(decode(context)), pending ids, characters of the pending text sent)``."""

Decode = Callable[[list[int]], str]

_PUNCTUATION = (".", ",", "'", "?", "!")


def _common_prefix(texts: Sequence[str]) -> int:
    first = min(texts, key=len)
    end = len(first)
    for text in texts:
        if text is first:
            continue
        if not text.startswith(first[:end]):
            end = len(os.path.commonprefix([first[:end], text]))
    return end


@attrs.frozen(eq=False)
class Window:
    """The probing window (implements :class:`puredetok.core.codec.Decoding`)."""

    decode: Decode = attrs.field(repr=False)
    """The tokenizer's own decode, with the codec's options bound (or its backend's, where that
    decodes the same: a call costs less)."""
    probes: tuple[tuple[int, ...], ...]
    """Continuations whose effect on the window decides what is certain."""
    anchor: tuple[int, ...]
    """Ids put before a cut context."""
    every: int = ATTEMPT
    initial: Hold = ((), 0, (), 0)
    idle: None = None
    """Never a hold of this model: every step goes through :meth:`step`."""
    fast: tuple[str | None, ...] = ()

    def batch(self, windows: Sequence[list[int]]) -> list[str | None]:
        """Decode each window; None for one the decode refuses.

        One call each: ``decode_batch`` costs more than a few single calls.
        """
        decode = self.decode
        texts: list[str | None] = []
        for window in windows:
            try:
                texts.append(decode(window))
            except BaseException as error:  # the decode refuses it (the crate may panic)
                if isinstance(error, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                    raise
                texts.append(None)
        return texts

    def _decode_all(self, window: list[int]) -> list[str] | None:
        """The window's text and each probe's, or None if the decode refuses the window."""
        text, *probed = self.batch([window] + [window + list(probe) for probe in self.probes])
        if text is None:
            return None
        return [text] + [text if probe is None else probe for probe in probed]

    def step(self, hold: Hold, token_id: int) -> tuple[Hold, str]:
        """Append the id; every ``every`` pending ids, decode and send what is certain."""
        context, base, pending, sent = hold
        pending = (*pending, token_id)
        if len(pending) % self.every:
            return (context, base, pending, sent), ""
        return self._attempt(context, base, pending, sent)

    def _attempt(
        self, context: tuple[int, ...], base: int, pending: tuple[int, ...], sent: int
    ) -> tuple[Hold, str]:
        window = [*context, *pending]
        texts = self._decode_all(window)
        if texts is None:  # nothing can be said about this window yet: hold
            return (context, base, pending, sent), ""
        text = texts[0]
        certain = base + _common_prefix([t[base:] for t in texts])
        # A trailing U+FFFD may be an incomplete character that a later byte (or several) completes.
        certain = min(certain, base + len(text[base:].rstrip("\ufffd")))
        delta = text[base + sent : certain] if certain > base + sent else ""
        sent = max(sent, certain - base)
        if certain == len(text):
            context, base, pending, sent = tuple(window), len(text), (), 0
        else:
            context, base, pending, sent = self._close(context, base, pending, sent, text, certain)
        if len(context) >= TRIM:
            trimmed = self._trim(context, base, pending, texts)
            if trimmed is not None:
                return (*trimmed, pending, sent), delta
        if len(window) < LIMIT:
            return (context, base, pending, sent), delta
        # Past the limit: the pending text is sent as it stands and the window is cut unchecked.
        delta += text[base + sent :]
        kept = (*self.anchor, *window[-KEEP:])
        return (kept, len(self.decode(list(kept))), (), 0), delta

    def _close(
        self,
        context: tuple[int, ...],
        base: int,
        pending: tuple[int, ...],
        sent: int,
        text: str,
        certain: int,
    ) -> Hold:
        """Move the pending ids whose text is closed (a prefix of the certain text) to the context."""
        cuts = sorted(
            {c for c in (len(pending) - 1, len(pending) - 2, len(pending) // 2) if c > 0}, reverse=True
        )
        heads = self.batch([[*context, *pending[:c]] for c in cuts]) if cuts else []
        for cut, head in zip(cuts, heads):
            if head is not None and len(head) <= certain and text.startswith(head):
                return (*context, *pending[:cut]), len(head), pending[cut:], base + sent - len(head)
        return context, base, pending, sent

    def _trim(
        self, context: tuple[int, ...], base: int, pending: tuple[int, ...], texts: list[str]
    ) -> tuple[tuple[int, ...], int] | None:
        """A shorter context that the window decodes the same way beyond, with and without every
        probe: the last ids behind the anchor, the last ids alone, or nothing at all (a decoder
        that drops what came first). None if none of them does.
        """
        tail = context[-KEEP:]
        for kept in dict.fromkeys(((*self.anchor, *tail), tail, ())):
            head, *shorter = self.batch(
                [list(kept)] + [[*kept, *pending, *probe] for probe in ((), *self.probes)]
            )
            if head is None:
                continue
            if all(
                mine is not None and mine.startswith(head) and mine[len(head) :] == theirs[base:]
                for mine, theirs in zip(shorter, texts)
            ):
                return kept, len(head)
        return None

    def feed(self, hold: Hold, token_ids: Sequence[int]) -> tuple[Hold, str]:
        """Step through the ids."""
        out = []
        for token_id in token_ids:
            hold, text = self.step(hold, token_id)
            out.append(text)
        return hold, "".join(out)

    def finish(self, hold: Hold) -> str:
        """Everything not yet sent."""
        context, base, pending, sent = hold
        if not pending:
            return ""
        return self.decode([*context, *pending])[base + sent :]


def _pick(ids: Sequence[int], texts: Sequence[str], test: Callable[[str], bool]) -> int | None:
    return next((i for i, text in zip(ids, texts) if test(text)), None)


def build_window(
    decode: Decode,
    batch: Callable[[Sequence[Sequence[int]]], list[str | None]],
    size: int,
    added: Collection[int],
) -> Window:
    """Choose the probes and the anchor from a sample of the vocabulary (its added ids, and ids
    spread over the whole range), by what each decodes to alone.
    """
    step = max(1, size // 4000)
    ids = sorted({*range(0, size, step), *(i for i in added if 0 <= i < size)})
    texts = [t or "" for t in batch([[i] for i in ids])]
    plain = _pick(ids, texts, lambda t: t.isascii() and t.isalpha() and len(t) > 1)
    plain = plain if plain is not None else _pick(ids, texts, lambda t: t.strip() != "" and "\ufffd" not in t)
    chosen = [
        plain,
        _pick(ids, texts, lambda t: t.strip() in _PUNCTUATION and t.strip() != ""),
        _pick(ids, texts, lambda t: t != "" and t.strip() == ""),
        _pick(ids, texts, lambda t: t.startswith(" ") and t.strip().isalpha()),
        _pick(ids, texts, lambda t: t == "\ufffd"),
        _pick(ids[::-1], texts[::-1], lambda t: "\ufffd" in t),
        _pick(
            [i for i in ids if i not in added],
            [t for i, t in zip(ids, texts) if i not in added],
            lambda t: t == "",
        ),
        _pick([i for i in ids if i in added], [t for i, t in zip(ids, texts) if i in added], lambda t: True),
        _pick(ids, texts, lambda t: t.isdecimal()),
    ]
    probes = tuple(dict.fromkeys((i,) for i in chosen if i is not None))
    anchor = () if plain is None else (plain,)
    return Window(decode=decode, probes=probes, anchor=anchor)
