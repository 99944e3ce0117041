"""``WhisperTokenizer``, as its ``decode`` works by default: the byte-level text of the backend,
then every timestamp written ``<|d+.d+|>`` (the timestamp tokens' text, or the same characters
spelled by other tokens) removed. With ``skip_special_tokens``, a sequence that starts with
``<|startofprev|>`` (a previous-text prompt) loses everything before ``<|startoftranscript|>``.

Held back: the start of a possible timestamp (``<``, ``<|``, ``<|`` and digits, ...), until it
completes (and vanishes) or fails (and is text). Only a run of digits makes that hold grow; it is
kept as a rope, so each step stays O(1).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import attrs

from puredetok._core.chain import Chain
from puredetok._core.decoders.base import OneAtATime, Piece
from puredetok._core.rope import EMPTY_ROPE, Rope

# The states of the timestamp automaton: what of "<|" digits "." digits "|>" the held text is.
_NONE, _ANGLE, _BAR, _DIGITS, _DOT, _FRACTION, _CLOSE = range(7)
_HOLD: tuple[int, Rope] = (_NONE, EMPTY_ROPE)


def _advance(state: int, char: str) -> int | None:
    """The next state after ``char``; None when the held text can no longer be a timestamp;
    ``_NONE`` after the closing ``>`` (a match).
    """
    if state == _ANGLE:
        return _BAR if char == "|" else None
    if state in (_BAR, _DIGITS):
        if char.isdecimal():  # Python's \d: a Unicode decimal digit
            return _DIGITS
        return _DOT if state == _DIGITS and char == "." else None
    if state in (_DOT, _FRACTION):
        if char.isdecimal():
            return _FRACTION
        return _CLOSE if state == _FRACTION and char == "|" else None
    return _NONE if char == ">" else None  # _CLOSE


@attrs.frozen
class TimestampStage(OneAtATime):
    """Whisper's timestamp filter over the glued output: ``re.sub`` of ``<|d+.d+|>`` by nothing.

    The hold is the state of the automaton and the text it holds.
    """

    initial: tuple[int, Rope] = _HOLD
    idle: tuple[int, Rope] = _HOLD

    def push(self, hold: tuple[int, Rope], value: str, glued: bool) -> tuple[tuple[int, Rope], list[Piece]]:
        """Run the automaton over the text."""
        state, held = hold
        if state == _NONE and "<" not in value:
            return hold, [(value, True)]
        out: list[str] = []
        start = 0  # value[start:position] is plain text not yet written out
        for position, char in enumerate(value):
            if state == _NONE:
                if char == "<":
                    out.append(value[start:position])
                    state, held, start = _ANGLE, Rope.of("<"), position + 1
                continue
            following = _advance(state, char)
            if following is None:
                out.append(str(held))  # never a timestamp: it is text; the character starts afresh
                state, held, start = _NONE, EMPTY_ROPE, position
                if char == "<":
                    state, held, start = _ANGLE, Rope.of("<"), position + 1
            elif following == _NONE:
                state, held, start = _NONE, EMPTY_ROPE, position + 1  # a timestamp: removed
            else:
                state, held, start = following, held.append(char), position + 1
        if state == _NONE:
            out.append(value[start:])
        text = "".join(out)
        new = _HOLD if state == _NONE else (state, held)
        return new, ([(text, True)] if text else [])

    def flush(self, hold: tuple[int, Rope]) -> list[Piece]:
        """An unfinished timestamp is text."""
        text = str(hold[1])
        return [(text, True)] if text else []

    def is_hold(self, hold: object) -> bool:
        """``(automaton state, held text)``; nothing held outside a possible timestamp."""
        if type(hold) is not tuple or len(hold) != 2 or type(hold[0]) is not int or type(hold[1]) is not Rope:
            return False
        state, held = hold
        return _NONE <= state <= _CLOSE and (state != _NONE or not held.size)


_START, _PROMPT, _PASS = 0, 1, 2


@attrs.frozen(eq=False)
class WhisperPrompt:
    """The prompt rule of ``skip_special_tokens=True`` around the byte-level chain (implements
    :class:`puredetok._core.codec.Decoding`): the hold is ``(mode, chain hold)``.
    """

    chain: Chain
    previous: int
    """The id of ``<|startofprev|>``: a sequence starting with it is a prompt."""
    start_of_transcript: int | None
    """Where the prompt ends (the text starts here)."""
    initial: tuple[int, Hashable] = attrs.field(init=False)
    idle: tuple[int, Hashable] = attrs.field(init=False)
    fast: Sequence[str | None] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "initial", (_START, self.chain.initial))
        object.__setattr__(self, "idle", (_PASS, self.chain.idle))
        object.__setattr__(self, "fast", self.chain.fast)

    def tail_start(self, token_ids: Sequence[Any]) -> tuple[int, tuple[int, Any]]:
        """The prompt rule looks at the ids from the start: every id is read."""
        return 0, self.initial

    def step(self, hold: tuple[int, Any], token_id: int) -> tuple[tuple[int, Any], str]:
        """The prompt rule, then the chain."""
        mode, inner = hold
        # transformers cuts a prompt at the first <|startoftranscript|>: where both names are one id
        # (both missing, both the unknown token's), a sequence that starts with it is kept whole.
        if mode == _START and token_id == self.previous and token_id != self.start_of_transcript:
            return (_PROMPT, inner), ""
        if mode == _PROMPT:
            if token_id != self.start_of_transcript:
                return hold, ""
            mode = _PASS
        new_inner, text = self.chain.step(inner, token_id)
        if new_inner is self.chain.idle:
            return self.idle, text
        return (_PASS, new_inner), text

    def feed(self, hold: tuple[int, Any], token_ids: Sequence[int]) -> tuple[tuple[int, Any], str]:
        """Step until the prompt rule is settled, then the chain takes the rest at once."""
        out = []
        position = 0
        while hold[0] != _PASS and position < len(token_ids):
            hold, text = self.step(hold, token_ids[position])
            out.append(text)
            position += 1
        if position < len(token_ids):
            inner, text = self.chain.feed(hold[1], token_ids[position:])
            hold = self.idle if inner is self.chain.idle else (_PASS, inner)
            out.append(text)
        return hold, "".join(out)

    def finish(self, hold: tuple[int, Any]) -> str:
        """A prompt that never reached its transcript decodes to nothing."""
        return "" if hold[0] == _PROMPT else self.chain.finish(hold[1])

    def is_hold(self, hold: object) -> bool:
        """``(mode, chain hold)``."""
        return (
            type(hold) is tuple
            and len(hold) == 2
            and type(hold[0]) is int
            and hold[0] in (_START, _PROMPT, _PASS)
            and self.chain.is_hold(hold[1])
        )
