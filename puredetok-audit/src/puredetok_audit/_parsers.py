"""Chat responses that a reasoning or tool parser split: the pieces joined again as the parser
took them from the text, so that they can be compared with the exact text of the ids (what
vLLM's parsers drop and keep: docs/audit.md, "Chat responses split by a reasoning or tool
parser").
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

REASONING_MARKERS = (
    ("<think>", "</think>"),
    ("<seed:think>", "</seed:think>"),
    ("\u25c1think\u25b7", "\u25c1/think\u25b7"),
    ("[THINK]", "[/THINK]"),
)
"""The start and end markers of reasoning the parsers look for (Qwen3, DeepSeek-R1 and most
others; Seed-OSS; Kimi; Mistral's Magistral), tried in this order."""

TOOL_MARKERS = (
    "<tool_call>",
    "[TOOL_CALLS]",
    "<|tool_calls_section_begin|>",
    "<\uff5ctool\u2581calls\u2581begin\uff5c>",
    "<|python_tag|>",
)
"""The markers that start a tool call (Hermes and Qwen; Mistral; Kimi K2; DeepSeek-V3; Llama 3)."""


@attrs.frozen
class Joined:
    """A split response's pieces joined again with the exact text's markers."""

    text: str
    offsets: tuple[int, ...]
    """Where each piece's text begins in ``text`` (a tool call's: where the calls begin)."""
    dropped: tuple[int, int] | None = None
    """The offset and length of the exact text's stretch that the parser dropped (the text
    before a start marker), taken from the exact text unchecked."""


def plain_join(parts: Sequence[tuple[str, str]]) -> str:
    """The reasoning, content and tool names of a split response, one after the other."""
    return "".join(text for _, text in parts)


def _tool_at(text: str, start: int) -> int:
    found = [at for at in (text.find(marker, start) for marker in TOOL_MARKERS) if at >= 0]
    return min(found) if found else -1


def _in_order(names: Sequence[str], text: str, at: int) -> bool:
    for name in names:
        at = text.find(name, at)
        if at < 0:
            return False
        at += len(name)
    return True


def _squeezed(text: str, markers: Sequence[str]) -> str:
    """``text`` without the spaces at its ends and around each marker."""
    for marker in markers:
        text = marker.join(piece.strip() for piece in text.split(marker))
    return text.strip()


class _Joiner:
    """The pieces placed one after the other against the exact text, the markers the parser
    removed put back where the exact text has them at a piece's start.
    """

    def __init__(self, exact: str, pair: tuple[str, str] | None, after: bool) -> None:
        self.exact, self.pair = exact, pair
        self.after = after
        """The first reasoning piece goes after the start marker even where it also fits before."""
        self.out: list[str] = []
        self.length = 0
        """The length of the text joined so far."""
        self.at = 0
        """Where in the exact text the next piece belongs."""
        self.region = 0
        """Where in the exact text the current run of pieces of one kind began."""
        self.started = False
        """A start marker was passed (or the text before one dropped)."""
        self.dropped: tuple[int, int] | None = None

    def take(self, text: str) -> None:
        self.out.append(text)
        self.length += len(text)
        self.at += len(text)

    def markers(self, text: str) -> None:
        """Put back the markers the exact text has where ``text`` should begin."""
        if self.pair is None:
            return
        moved = True
        while moved:
            moved = False
            for marker in self.pair:
                if self.exact.startswith(marker, self.at) and not text.startswith(marker):
                    self.take(marker)
                    self.started |= marker == self.pair[0]
                    moved = True

    def turn(self, marker: str, text: str) -> None:
        """At a change of kind: go to the marker between the two kinds, where the exact text has
        it after the current run began (a wrong piece may have ended before or after it). The
        text skipped to reach the first start marker is the parser's to drop.
        """
        found = self.exact.find(marker, self.region)
        if self.exact.startswith(text, self.at):  # the piece holds the marker, or needs none
            found = -1
        if found >= 0:
            if self.pair is not None and marker == self.pair[0] and not self.started and found > self.at:
                self._drop(found, found)
            self.at = found
        self.region = self.at

    def _drop(self, marker: int, to: int) -> None:
        """The text from here to the start marker at ``marker`` is dropped; go on at ``to``."""
        self.dropped = (self.at, marker - self.at)
        self.out.append(self.exact[self.at : to])
        self.length += to - self.at
        self.at = to
        self.started = to > marker

    def drop(self, kind: str, text: str) -> None:
        """Take the text before the first start marker as dropped by the parser when ``text``
        belongs after that marker: it begins there, or it is the first piece and reasoning.
        """
        first = self.after and kind == "reasoning"
        if self.pair is None or self.started or (self.exact.startswith(text, self.at) and not first):
            return
        start, end = self.pair
        found = self.exact.find(start, self.at)
        if found <= self.at:
            return
        after = found + len(start)
        fits = self.exact.startswith(text, after) or (
            self.exact.startswith(end, after) and self.exact.startswith(text, after + len(end))
        )
        if not fits and not first and not (kind == "reasoning" and self.length == 0):
            return
        self._drop(found, after)


def rejoin(exact: str, parts: Sequence[tuple[str, str]]) -> Joined | None:
    """The engine's text as the parser split it from its output, joined again.

    Where the pieces are ``exact`` without its markers (and maybe without the text just before
    its first start marker, which the parser dropped), they are placed where they can only go
    (:func:`_placed`). Else, to say where they differ, each piece is placed where it fits
    (:func:`_rejoin`): a stream's reasoning can fit both before the start marker (the text before
    it, sent as reasoning) and after it; of the two joins, the one that agrees with ``exact``
    longer is taken (the first when they agree as long).
    """
    placed = _placed(exact, parts)
    if placed is not None:
        return placed
    joined = _rejoin(exact, parts, False)
    if joined is None or joined.text == exact or not any(k == "reasoning" for k, _ in parts):
        return joined
    other = _rejoin(exact, parts, True)
    if other is not None and _agree(other.text, exact) > _agree(joined.text, exact):
        return other
    return joined


def _placed(exact: str, parts: Sequence[tuple[str, str]]) -> Joined | None:
    """The pieces joined with ``exact``'s markers put back between them, if that is ``exact``
    itself, or ``exact`` less a stretch that ends at its first start marker (the text the
    parser dropped: how long it is, the pieces say); else None (tool calls, and reasoning and
    content with no marker between them, too, are left to :func:`_rejoin`). A piece may hold a
    marker at its start (a parser that passes it on), but is never placed across one it does not
    hold.
    """
    kinds = {kind for kind, text in parts if text or kind == "tool"}
    pair = _pair(exact)
    if "tool" in kinds or (pair is None and "reasoning" in kinds and kinds - {"reasoning"}):
        return None
    markers = pair or ()
    joined = plain_join(parts)
    missing = len(_bare(exact, markers)) - len(_bare(joined, markers))
    drop: tuple[int, int] | None = None
    if missing:
        first = -1 if pair is None else exact.find(pair[0])
        if missing < 0 or first < missing:
            return None
        drop = (first - missing, missing)
    out: list[str] = []
    offsets: list[int] = []
    at = length = 0
    dropped = drop is None

    def put_back(text: str) -> None:
        nonlocal at, length, dropped
        moved = True
        while moved:
            moved = False
            if drop is not None and at == drop[0] and not dropped:
                out.append(exact[at : at + drop[1]])
                at, length, moved, dropped = at + drop[1], length + drop[1], True, True
            for marker in markers:
                if exact.startswith(marker, at) and not text.startswith(marker):
                    out.append(marker)
                    at, length, moved = at + len(marker), length + len(marker), True

    for _, text in parts:
        if text:
            put_back(text)
            if not exact.startswith(text, at):
                return None
            out.append(text)
            at += len(text)
        offsets.append(length)
        length += len(text)
    put_back("")
    if at != len(exact) or not dropped:
        return None
    return Joined("".join(out), tuple(offsets), drop)


def _pair(exact: str) -> tuple[str, str] | None:
    """The reasoning markers of ``exact``: the first pair of which it has either."""
    return next(((s, e) for s, e in REASONING_MARKERS if s in exact or e in exact), None)


def _bare(text: str, markers: Sequence[str]) -> str:
    """``text`` without ``markers``."""
    for marker in markers:
        text = text.replace(marker, "")
    return text


def _agree(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)) + (a == b))


def _rejoin(exact: str, parts: Sequence[tuple[str, str]], after: bool) -> Joined | None:
    """The engine's text as the parser split it from its output, joined again with the markers
    ``exact`` has, each piece where it fits; the text before a start marker that the parser
    dropped is taken from ``exact`` and named (:attr:`Joined.dropped`). None when it cannot be
    joined so that it is comparable (which, docs/audit.md says).
    """
    pair = _pair(exact)
    kinds = {kind for kind, text in parts if text or kind == "tool"}
    if pair is None and "reasoning" in kinds and kinds - {"reasoning"}:
        return None
    joiner = _Joiner(exact, pair, after)
    offsets: list[int] = []
    tools: list[str] = []
    last: str | None = None
    for kind, text in parts:
        if kind == "tool":
            tools.append(text)
            offsets.append(-1)
            continue
        if not text:
            offsets.append(joiner.length)
            continue
        if pair is not None and last is not None and kind != last:
            joiner.turn(pair[1] if kind == "content" else pair[0], text)
        last = kind
        joiner.markers(text)
        joiner.drop(kind, text)
        joiner.markers(text)
        offsets.append(joiner.length)
        joiner.take(text)
    if pair is not None and not joiner.started and any(kind == "reasoning" for kind, _ in parts):
        found = exact.find(pair[0], joiner.at)
        if found > joiner.at:  # reasoning, none of it placed: what comes before it was dropped
            joiner._drop(found, found)
    joiner.markers("")
    if tools:
        at = _tool_at(exact, joiner.region)
        if at < 0 or not _in_order(tools, exact, at):
            return None
        offsets = [joiner.length if offset < 0 else offset for offset in offsets]
        joiner.out.append(exact[at:])
    engine = "".join(joiner.out)
    markers = (*(pair or ()), *(TOOL_MARKERS if tools else ()))
    if engine != exact and _squeezed(engine, markers) == _squeezed(exact, markers):
        return None
    return Joined(engine, tuple(offsets), joiner.dropped)
