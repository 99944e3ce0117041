"""The generic fallback: streaming for a decoder puredetok has no exact model of, by calling the
tokenizer's own ``decode`` on a bounded window of ids, and sending only text it has checked.

What "certain" means here. For an arbitrary ``decode`` nothing about the future is known, so the
fallback asks it: text is sent only once it is a common prefix of ``decode(window)`` and of
``decode(window + probe)`` for a few probes chosen when the codec is built to stand for the ways a
next token changes text already decoded: a word (shows trailing whitespace a strip would remove,
and cleanup rules that need a following word), a punctuation mark (space cleanup), a byte that
decodes to U+FFFD alone (a byte run that a later byte spoils). A probe is kept only where the
build shows it changing text: the word where it changes the text of one of the ~5,000 sampled ids
or of a low id after an id that is one space (cleanup's " ' " rule on T5's "▁" then "'"), the mark
where it changes the text of an id that ends in a space, the byte where it changes a complete
character before it (byte-level BPE and SentencePiece without cleanup only append, and keep none or
only the byte). A rule that needs more than one next id to show (cleanup's " 've" after " 'v") is
beyond what the probes show. A trailing U+FFFD is held too: it may be a character that more bytes
complete. So text that one of those changes is held, never sent early and then contradicted.

How the window stays bounded without losing text.

* Ids are never dropped from the window: an id that decodes to nothing alone may still matter
  next to others (a lone UTF-8 lead byte in ByT5, a CTC pad between repeats).
* The window is ``context + pending``; its text is compared beyond ``base``, the length of the
  context's own text, which is certain and already sent.
* A step only records the id (one small tuple on top of the hold); every ``ATTEMPT`` ids the window
  is decoded and what is certain is sent. The probes are decoded after the window's tail (its last
  ``TAIL`` ids behind an anchor id), which costs a fraction of the whole window; a tail that begins
  inside a character (its last bytes shown as U+FFFD) decides on the rest of its text; the whole
  window is probed instead whenever the tail cannot decide (the tail's text is not the end of the
  window's, or the probes change all of it: a change may reach further back). When all of the
  pending text is certain, the pending ids join the context; when only part is, the ids whose text
  is already certain do.
* When the context reaches ``TRIM`` ids it is cut to its last ``KEEP`` ids behind the anchor (an
  id with plain text, so that start-of-text rules such as dropping a leading space apply to the
  anchor, not to the kept ids), or to those ids alone, or to nothing (a decoder that drops what
  came first). A cut is made only if the shorter context ends with the same text as the longer
  one and continues it the same way after one trim probe: three UTF-8 continuation bytes, which
  show a character whose first bytes the text does not show yet (as in ByT5), then a word. That
  is one decode of the whole context; the short side's texts come from the probed tail where they
  were already decoded. Otherwise the context keeps growing, up to ``LIMIT`` ids.
* ``finish`` sends the window's text that is still held, so the stream's text equals ``decode``.

The bounds this leaves (documented in the guarantees): text is held for up to ``ATTEMPT`` ids
between decodes; the fallback is prefix-safe against the changes its probes show, and exact as
long as the decoder looks back no further than the context and text stays uncertain for fewer than
``LIMIT`` ids. Past ``LIMIT`` (say a run of whitespace longer than that, before a strip) the oldest
text is sent as it stands.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from typing import Any

import attrs

ATTEMPT = 32
"""Pending ids between two decodes of the window."""
TAIL = 4
"""Ids of the window's end decoded with the probes (a UTF-8 character's bytes, at most)."""
KEEP = TAIL
"""Ids of context kept (behind the anchor) when the context is cut: the probed tail."""
TRIM = 32
"""Context length from which a cut is tried."""
LIMIT = 96
"""The most ids the window holds; past it the context is cut, and pending text sent, unchecked."""

Core = tuple[int, tuple[int, ...], int, tuple[int, ...], int]
"""``(0, context ids, len(decode(context)), pending ids, characters of the pending text sent)``:
the hold right after a decode of the window."""
Hold = Core | tuple[int, int, "Hold"]
"""A :data:`Core`, or ``(n, id, previous hold)``: the ``n``-th id since the last decode on top of
the hold before it. A step that only records an id makes one small tuple and copies nothing."""
_Window = tuple[tuple[int, ...], int, tuple[int, ...], int]

Decode = Callable[[list[int]], str]
Decoded = dict[tuple[int, ...], str | None]
"""The texts of the probed tail (behind the anchor), alone (key ``()``) and after each probe."""

_PUNCTUATION = (".", ",", "'", "?", "!")


def decode_or_none(decode: Decode, ids: list[int]) -> str | None:
    """``decode(ids)``, or None if the decode refuses them (the crate may panic)."""
    try:
        return decode(ids)
    except BaseException as error:
        if isinstance(error, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        return None


@attrs.frozen(eq=False)
class Window:
    """The probing window (implements :class:`puredetok._core.codec.Decoding`)."""

    decode: Decode = attrs.field(repr=False)
    """The tokenizer's own decode, with the codec's options bound (or its backend's, where that
    decodes the same: a call costs less)."""
    probes: tuple[tuple[int, ...], ...]
    """Continuations whose effect on the window decides what is certain."""
    anchor: tuple[int, ...]
    """Ids put before a cut context and before the probed tail."""
    anchor_text: str
    """``decode(anchor)``."""
    trim_probes: tuple[tuple[int, ...], ...] = ()
    """The probes a cut of the context is checked with (besides no probe at all)."""
    every: int = ATTEMPT
    size: int = 2**32
    """Ids in a hold are below this (the vocabulary size)."""
    initial: Hold = (0, (), 0, (), 0)
    idle: None = None
    """Never a hold of this model: every step goes through :meth:`step`."""
    fast: tuple[str | None, ...] = ()

    def one(self, window: list[int]) -> str | None:
        """Decode one window; None if the decode refuses it."""
        return decode_or_none(self.decode, window)

    def tail_start(self, token_ids: Sequence[Any]) -> tuple[int, Hold]:
        """Nothing about an unknown decode bounds what it reads of a prompt: every id is read."""
        return 0, self.initial

    def step(self, hold: Hold, token_id: int) -> tuple[Hold, str]:
        """Record the id; every ``every`` ids, decode and send what is certain."""
        count = hold[0] + 1
        if count < self.every:
            return (count, token_id, hold), ""
        (_, context, base, pending, sent), recent = _unwind(hold)
        window, delta = self._attempt(context, base, (*pending, *recent, token_id), sent)
        return (0, *window), delta

    def _uncertain_tail(self, window: list[int], text: str) -> tuple[int, Decoded] | None:
        """How many trailing characters of ``text`` a probe may change, judged on the window's tail,
        with the texts of the tail (behind the anchor) alone (key ``()``) and after each probe; None
        where the tail cannot tell.
        """
        if len(window) <= TAIL:
            return None
        one = self.one
        tail = [*self.anchor, *window[-TAIL:]]
        head = one(tail)
        anchor_text = self.anchor_text
        if head is None or not head.startswith(anchor_text):
            return None
        start = len(anchor_text)
        if not text.endswith(head[start:]):
            # The tail may begin inside a character whose first bytes come before it: its last
            # bytes show as U+FFFD; the rest of the tail's text must still end the window's.
            rest = head[start:].lstrip("\ufffd")
            if len(rest) == len(head) - start or not text.endswith(rest):
                return None
            start = len(head) - len(rest)
        decoded: Decoded = {(): head}
        stable = len(head)
        for probe in self.probes:
            probed = decoded[probe] = one(tail + list(probe))
            if probed is not None and not probed.startswith(head[:stable]):
                stable = len(os.path.commonprefix([head[:stable], probed]))
        if stable <= start:  # the probes change all of the tail: a change may reach further back
            return None
        return len(head) - stable, decoded

    def _certain(self, window: list[int], base: int, text: str) -> tuple[int, Decoded]:
        """The end of the window's text that no probe changes, and the texts decoded to tell it."""
        judged = self._uncertain_tail(window, text)
        if judged is not None:
            uncertain, decoded = judged
            certain = len(text) - uncertain
        else:
            # One call each: ``decode_batch`` costs more than a few single calls.
            probed = [self.one(window + list(probe)) for probe in self.probes]
            certain = base + len(
                os.path.commonprefix([text[base:]] + [t[base:] for t in probed if t is not None])
            )
            decoded = {}
        # A trailing U+FFFD may be an incomplete character that a later byte (or several) completes.
        return max(base, min(certain, base + len(text[base:].rstrip("\ufffd")))), decoded

    def _attempt(
        self, context: tuple[int, ...], base: int, pending: tuple[int, ...], sent: int
    ) -> tuple[_Window, str]:
        window = [*context, *pending]
        text = self.one(window)
        if text is None:  # nothing can be said about this window yet: hold
            return (context, base, pending, sent), ""
        certain, decoded = self._certain(window, base, text)
        delta = text[base + sent : certain] if certain > base + sent else ""
        if certain == len(text):
            context, base, pending, sent = tuple(window), len(text), (), 0
        else:
            sent = max(sent, certain - base)
            context, base, pending, sent = self._close(context, base, pending, sent, text, certain)
            decoded = {}  # the context no longer ends with the probed tail
        if len(pending) >= LIMIT:
            # Uncertain for too long: the pending text is sent as it stands and joins the context.
            delta += text[base + sent :]
            context, base, pending, sent = tuple(window), len(text), (), 0
        if len(context) >= TRIM:
            trimmed = self._trim(context, text[:base], decoded)
            if trimmed is None and len(context) >= LIMIT:
                # The cut is not confirmed; the context is cut all the same to stay bounded.
                kept = (*self.anchor, *context[-KEEP:])
                trimmed = kept, len(self.one(list(kept)) or "")
            if trimmed is not None:
                context, base = trimmed
        return (context, base, pending, sent), delta

    def _close(
        self,
        context: tuple[int, ...],
        base: int,
        pending: tuple[int, ...],
        sent: int,
        text: str,
        certain: int,
    ) -> _Window:
        """Move the pending ids whose text is closed (a prefix of the certain text) to the context."""
        for cut in (len(pending) - 1, len(pending) - 2):
            if cut <= 0:
                break
            head = self.one([*context, *pending[:cut]])
            if head is not None and len(head) <= certain and text.startswith(head):
                return (*context, *pending[:cut]), len(head), pending[cut:], base + sent - len(head)
        return context, base, pending, sent

    def _trim(
        self, context: tuple[int, ...], text: str, decoded: Decoded
    ) -> tuple[tuple[int, ...], int] | None:
        """A shorter context that ends with the same text as the context (``text``, all certain)
        and continues it the same way after each trim probe: its last ids behind the anchor, those
        ids alone, or nothing at all (for a decoder that drops what came first). None if none does.
        ``decoded`` holds the texts of the probed tail, if the context ends with it (they are not
        decoded again).
        """
        one, probes = self.one, self.trim_probes
        longer = [one([*context, *probe]) for probe in probes]
        if any(t is None or not t.startswith(text) for t in longer):
            return None
        tail = context[-KEEP:]
        for kept, prefix, known in (
            ((*self.anchor, *tail), self.anchor_text, decoded),
            (tail, "", {}),
            ((), "", {}),
        ):
            head = known[()] if () in known else one(list(kept))
            if head is None or not head.startswith(prefix) or not text.endswith(head[len(prefix) :]):
                continue
            for probe, theirs in zip(probes, longer):
                mine = known[probe] if probe in known else one([*kept, *probe])
                if mine is None or not mine.startswith(head) or mine[len(head) :] != str(theirs)[len(text) :]:
                    break
            else:
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
        (_, context, base, pending, sent), recent = _unwind(hold)
        if not pending and not recent:
            return ""
        return self.decode([*context, *pending, *recent])[base + sent :]

    def is_hold(self, hold: object) -> bool:
        """A :data:`Hold` of ids in the vocabulary, no longer than the window ever grows."""
        ids: list[object] = []
        below = 0
        while type(hold) is tuple and len(hold) == 3:  # the links count down to the core, by one
            count, token_id, hold = hold
            if type(count) is not int or not 0 < count < self.every or (ids and count != below):
                return False
            ids.append(token_id)
            below = count - 1
        if ids and below != 0 or type(hold) is not tuple or len(hold) != 5:
            return False
        zero, context, base, pending, sent = hold
        if type(zero) is not int or zero != 0 or not all(type(n) is int and n >= 0 for n in (base, sent)):
            return False
        if (
            type(context) is not tuple
            or type(pending) is not tuple
            or len(context) + len(pending) > 3 * LIMIT
        ):
            return False
        size = self.size
        return all(type(i) is int and 0 <= i < size for i in (*context, *pending, *ids))


def _unwind(hold: Hold) -> tuple[Core, list[int]]:
    """The hold's last :data:`Core` and the ids recorded on top of it, oldest first."""
    count = hold[0]
    ids = [0] * count
    link: Any = hold
    for index in range(count - 1, -1, -1):
        _, ids[index], link = link
    return link, ids


def _pick(ids: Sequence[int], texts: Sequence[str], test: Callable[[str], bool]) -> int | None:
    return next((i for i, text in zip(ids, texts) if test(text)), None)


def _characters(
    ids: Sequence[int],
    texts: Sequence[str],
    added: Collection[int],
    batch: Callable[[Sequence[Sequence[int]]], list[str | None]],
) -> list[tuple[int, int]]:
    """Pairs of ids that together decode to a character where each alone decodes to nothing or
    to U+FFFD (the bytes of a UTF-8 character), found among a few such ids (at most 8 pairs).
    """
    partial = [i for i, t in zip(ids, texts) if t in ("", "\ufffd") and i not in added]
    # Spread over all of them: the first 48 alone may all be continuation bytes (ByT5's 0x80 - 0xAF).
    partial = [partial[k * len(partial) // 48] for k in range(min(48, len(partial)))]
    pairs = [(a, b) for a in partial for b in partial if a != b]
    return [pair for pair, text in zip(pairs, batch(pairs)) if text and "\ufffd" not in text][:8]


def _changes(
    probe: int,
    contexts: Sequence[Sequence[int]],
    batch: Callable[[Sequence[Sequence[int]]], list[str | None]],
) -> bool:
    """Whether the id changes the text of one of the contexts before it."""
    texts = batch([list(context) for context in contexts] + [[*context, probe] for context in contexts])
    alone, followed = texts[: len(contexts)], texts[len(contexts) :]
    return any(a is None or b is None or not b.startswith(a) for a, b in zip(alone, followed))


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
    # A word after a space shows what a strip or a cleanup rule would still do to held text.
    word = _pick(ids, texts, lambda t: t.startswith(" ") and t[1:].isascii() and t[1:].isalpha())
    word = word if word is not None else plain
    characters = _characters(ids, texts, added, batch)
    # A byte that decodes to U+FFFD alone shows a byte run that a later byte spoils; where a byte
    # spoils no complete character (byte-level BPE, ByT5) it shows nothing and costs a decode.
    spoiler = _pick(ids, texts, lambda t: t == "\ufffd")
    if spoiler is not None and characters and not _changes(spoiler, characters, batch):
        spoiler = None
    # A punctuation mark shows a space before it that cleanup removes; where it changes the text of
    # no id that ends in a space (after the anchor) it shows nothing. Marks and such ids are few,
    # and most have low ids (byte-level BPE: "!" is 0, " " 220; T5: "." is 5): the first 1,024 are
    # read besides the sample.
    low = [i for i in range(min(size, 1024)) if i not in added]
    alone = {**dict(zip(low, batch([[i] for i in low]))), **dict(zip(ids, texts))}
    known = {i: t for i, t in alone.items() if t is not None}
    lead = [] if plain is None else [plain]
    # Texts after the anchor: a leading space a text's start drops (SentencePiece's "▁") shows there.
    followed = dict(zip(known, batch([[*lead, i] for i in known])))
    mark = _pick(list(known), list(known.values()), lambda t: t.strip() in _PUNCTUATION and t.strip() != "")
    spaced = [[*lead, i] for i, t in followed.items() if t is not None and t.endswith(" ")][:64]
    if mark is not None and spaced and not _changes(mark, spaced, batch):
        mark = None
    # The word stands for any next token: where it changes the text of no sampled id (after the
    # anchor), as in byte-level BPE or SentencePiece without cleanup, it shows nothing there either.
    # The low ids (marks) are also tried after an id that is one space, as a word changes " '" into
    # "'" only there (cleanup's " ' " rule, T5's "▁" then "'").
    shown = word
    lead_text = known[plain] if plain is not None else ""
    space = _pick(list(followed), [t or "" for t in followed.values()], lambda t: t == lead_text + " ")
    sampled = [[*lead, i] for i in known]
    if space is not None:
        sampled += [[*lead, space, i] for i in low if i in known]
    if word is not None and not _changes(word, sampled, batch):
        shown = None
    chosen = [shown, mark, spoiler]
    probes = tuple(dict.fromkeys((i,) for i in chosen if i is not None))
    anchor = () if plain is None else (plain,)
    # A cut is checked with one probe: three UTF-8 continuation bytes, which complete a character
    # whose first bytes the text does not show (as in ByT5), then a word. One decode of the whole
    # context instead of one per probe; the bytes come first, so the word still shows a rule that
    # looks back at the text (a word first would end the character the bytes could complete).
    continuation = characters[0][1] if characters else None
    trim_probe = ((continuation,) * 3 if continuation is not None else ()) + (
        (word,) if word is not None else ()
    )
    trim_probes: tuple[tuple[int, ...], ...] = (trim_probe,) if trim_probe else ()
    anchor_text = decode(list(anchor)) if anchor else ""
    # The bytes also hide a rule of the text's start (CLIP strips the leading space of the whole
    # text): an id whose text begins with a space after the anchor but not alone is a second trim
    # probe, alone, so that a context is not cut to nothing where the next id would lose its space.
    if anchor:
        after = batch([[*anchor, i] for i in ids])
        starter = next(
            (
                i
                for i, alone_text, text in zip(ids, texts, after)
                if text is not None
                and text[len(anchor_text) :].startswith(" ")
                and not alone_text.startswith(" ")
            ),
            None,
        )
        if starter is not None and (starter,) not in trim_probes:
            trim_probes += ((starter,),)
    return Window(
        decode=decode,
        probes=probes,
        anchor=anchor,
        anchor_text=anchor_text,
        trim_probes=trim_probes,
        size=size,
    )
