"""``Replace``: replaces a literal string in each element (Llama-2's ``"▁" -> " "``).

As a stage over a joined stream it is exact for any chunking: matches are found left to right
without overlap, like ``str.replace``, and only a trailing proper prefix of the pattern is held.
``transformers``' cleanup is a cascade of these (:mod:`.cleanup`).
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from puredetok._core.decoders.base import MISS, Lanes, OneAtATime, Piece, Stage, Tokenwise, Unmodelled


@attrs.frozen
class ReplaceStage(OneAtATime):
    """Streaming ``str.replace`` of one or more literal patterns; the hold is (held text, whether
    it starts a new element).

    Several patterns are replaced in one left-to-right pass, which equals replacing them one after
    the other when no two can match at the same place and no replacement can make or break a
    match of another (:mod:`.cleanup` groups its rules that way).
    """

    rules: tuple[tuple[str, str], ...]
    """(pattern, replacement) pairs."""
    _regex: re.Pattern[str] = attrs.field(init=False, eq=False, repr=False)
    _replacement: dict[str, str] = attrs.field(init=False, eq=False, repr=False)
    _prefixes: frozenset[str] = attrs.field(init=False, eq=False, repr=False)
    _longest: int = attrs.field(init=False, eq=False, repr=False)
    _ends: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)
    _chars: frozenset[str] = attrs.field(init=False, eq=False, repr=False)
    _held_ends: frozenset[str] | None = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        patterns = [pattern for pattern, _ in self.rules]
        if not patterns or not all(patterns):
            raise ValueError("ReplaceStage needs non-empty patterns")
        setter = object.__setattr__
        setter(self, "_regex", re.compile("|".join(re.escape(p) for p in patterns)))
        setter(self, "_replacement", dict(self.rules))
        setter(self, "_prefixes", frozenset(p[:k] for p in patterns for k in range(1, len(p))))
        setter(self, "_longest", max(map(len, patterns)))
        setter(self, "_ends", tuple(sorted(self._prefixes)))
        setter(self, "_chars", frozenset("".join(patterns)))
        # The last characters of what may be held; None: an empty replacement (settle cannot tell).
        ends = frozenset(prefix[-1] for prefix in self._prefixes)
        setter(self, "_held_ends", ends if all(content for _, content in self.rules) else None)

    @property
    def initial(self) -> tuple[str, bool]:
        """Nothing held; the next text starts the first element."""
        return ("", True)

    @property
    def idle(self) -> tuple[str, bool]:
        """Nothing held, inside an element."""
        return ("", False)

    def push(self, hold: tuple[str, bool], value: str, glued: bool) -> tuple[tuple[str, bool], list[Piece]]:
        """Replace every match that is complete; hold a tail that could still become one."""
        buf, fresh = hold
        out: list[Piece] = []
        if not glued:
            if buf:
                out.append((buf, not fresh))
            buf, fresh = "", True
        text = buf + value if buf else value
        parts, position = [], 0
        for match in self._regex.finditer(text):
            parts.append(text[position : match.start()])
            parts.append(self._replacement[match.group()])
            position = match.end()
        rest = text[position:]
        keep = 0
        for k in range(min(self._longest - 1, len(rest)), 0, -1):
            if rest[-k:] in self._prefixes:
                keep = k
                break
        parts.append(rest[: len(rest) - keep])
        done = "".join(parts)
        if done or not glued:  # a new element is one for the stages after, even with no text yet
            out.append((done, not fresh))
            fresh = False
        return (rest[len(rest) - keep :], fresh), out

    def push_lanes(self, hold: tuple[str, bool], values: list[Any], glued: bool) -> Lanes | None:
        """With nothing held: each value with its matches replaced, in one piece; a value that ends
        with a proper prefix of a pattern (or gives no text) takes another path.
        """
        buf, fresh = hold
        if buf:
            return None
        if not glued:
            fresh = True
        search, ends = self._regex.search, self._ends
        replacement = self._replacement

        def replace(match: re.Match[str]) -> str:
            return replacement[match.group()]

        sub = self._regex.sub
        outs: list[Any] = []
        for value in values:
            if not value or (ends and value.endswith(ends)):
                outs.append(MISS)
            elif search(value) is None:
                outs.append(value)
            else:
                out = sub(replace, value)
                outs.append(out if out else MISS)
        return outs, ("", False), not fresh

    def settle(self, tail: Any, solid: bool) -> tuple[str, bool] | None:
        """Nothing is held after text whose last character ends no proper prefix of a pattern (it
        either ends a match or cannot start to), given ``solid`` (no empty unglued piece after it
        starts a new element) and no empty replacement (what it releases is never empty, so the
        hold is not fresh).
        What is released ends with the tail's last characters that are in no pattern.
        """
        held_ends = self._held_ends
        if not solid or held_ends is None or type(tail) is not str or not tail or tail[-1] in held_ends:
            return None
        chars = self._chars
        kept = len(tail)
        while kept and tail[kept - 1] not in chars:
            kept -= 1
        return tail[kept:], True

    def release(self, hold: tuple[str, bool], ahead: str) -> tuple[tuple[str, bool], list[Piece]]:
        """The held text up to the first place where, followed by ``ahead`` (or by a part of it
        and then the end), it could still begin a match: before that place no match can start in
        any future, and without one the held text is released as it is (see
        :meth:`~puredetok._core.decoders.base.ReleasingStage.release`).
        """
        buf, fresh = hold
        if not buf or not ahead:
            return hold, []
        patterns = self._replacement
        cut = 0
        while cut < len(buf):
            seen = buf[cut:] + ahead
            if any(seen.startswith(pattern) or pattern.startswith(seen) for pattern in patterns):
                break
            cut += 1
        if not cut:
            return hold, []
        return (buf[cut:], False), [(buf[:cut], not fresh)]

    def flush(self, hold: tuple[str, bool]) -> list[Piece]:
        """A held tail that never completed the pattern is text."""
        buf, fresh = hold
        return [(buf, not fresh)] if buf else []

    def is_hold(self, hold: object) -> bool:
        """``(held text, fresh)``, the held text a proper prefix of a pattern (or nothing)."""
        return (
            type(hold) is tuple
            and len(hold) == 2
            and type(hold[0]) is str
            and type(hold[1]) is bool
            and (not hold[0] or hold[0] in self._prefixes)
        )


@attrs.frozen
class Replace(Tokenwise):
    """The Replace decoder with a literal pattern."""

    pattern: str
    content: str
    depends_on_first = False

    def map_token(self, token: Any, first: bool) -> str:
        """Replace in one whole token."""
        return str(token).replace(self.pattern, self.content)

    def map_tokens(self, tokens: list[Any], first: bool) -> list[Any]:
        """Replace in every token."""
        pattern, content = self.pattern, self.content
        return [
            token.replace(pattern, content)
            if type(token) is str
            else (None if token is None else str(token).replace(pattern, content))
            for token in tokens
        ]

    def fragment_stage(self) -> Stage:
        """After a join: replace across fragments."""
        if not self.pattern:
            raise Unmodelled("Replace with an empty pattern after a decoder that joins tokens")
        return ReplaceStage(((self.pattern, self.content),))
