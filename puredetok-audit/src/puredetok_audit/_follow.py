"""One request compared as it streams: memory bounded whatever the request's length.

:class:`Follower` streams the exact text through the core and compares it with the engine's as
both arrive, keeping only what one has that the other has not reached, the last characters
compared, and both texts for :data:`SUFFIX_LIMIT` characters from where they may differ; its
report is the one :meth:`puredetok_audit._compare.Auditor.check` gives from the whole texts.
docs/audit.md ("Scale", one long request) says what it keeps and why.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence

import attrs

from puredetok._core import Codec, admit_token, finish, start, step
from puredetok_audit._compare import DUPLICATE_LIMIT, Difference, Facts, decide, duplicated, near_fffd
from puredetok_audit._records import Request
from puredetok_audit.replay._incremental import Pieces, StopFinder, common_prefix

STEP = 4096
"""The exact text is searched for the stop string in steps of this many characters."""

SUFFIX_LIMIT = 1 << 16
"""Characters of each text kept past the first difference (or the stop string's start)."""

BLOCK = 1024
"""The texts are compared once both have this many characters not yet compared (and at the end)."""


@attrs.frozen
class Followed:
    """A request compared as it streamed: the record (without its ids and text) and what the
    comparison found (None: equal), or the error that stopped it.
    """

    request: Request
    difference: Difference | None
    error: str | None = None


class _Kept:
    """Both texts from ``base`` on, from where something may differ (up to ``limit``, an
    absolute end), and the positions of the tokens and chunks there.
    """

    def __init__(
        self, base: int, start: str, limit: int, tokens: list[tuple[int, int]], chunks: list[tuple[int, int]]
    ) -> None:
        self.base, self.limit = base, limit
        self.engine, self.exact = [start], [start]
        self.engine_end = self.exact_end = base + len(start)
        self.tokens, self.chunks = tokens, chunks
        self.full = True
        """Everything from ``base`` on is kept (nothing ran past ``limit``)."""

    def add(self, engine: str, exact: str) -> None:
        self.engine_end = self._add(self.engine, self.engine_end, engine)
        self.exact_end = self._add(self.exact, self.exact_end, exact)

    def _add(self, parts: list[str], end: int, text: str) -> int:
        room = self.limit - end
        if len(text) > room:
            self.full = False
            text = text[: max(room, 0)]
        parts.append(text)
        return end + len(text)


class Follower:
    """One request's comparison as it streams (see the module). ``stops``: the stop strings that
    may have ended it (the one its record names at the end must be among them); ``include``: the
    engine kept the stop string or token; ``context``: characters shown on each side of a
    difference; ``step`` and ``limit``: see :data:`STEP` and :data:`SUFFIX_LIMIT` (the windows
    and the looks back need ``limit`` to be some hundred characters at least, which it is then
    made). Raises ValueError for a prompt id the tokenizer does not have.
    """

    def __init__(
        self,
        codec: Codec,
        prompt: Sequence[int],
        stops: Sequence[str],
        include: bool,
        context: int,
        *,
        step: int = STEP,
        limit: int = SUFFIX_LIMIT,
    ) -> None:
        self.codec, self.include, self.context = codec, include, context
        self.state = start(codec, prompt)
        self.before = self.state
        self.last = ""
        """The text of the last id (held back: a stop token's may be cut)."""
        self.ids = 0
        self.chunks = 0
        self.error: str | None = None
        stop_length = max(map(len, stops), default=0)
        self.margin = max(context, 4) + 2 * DUPLICATE_LIMIT + 8 + stop_length
        self.history_size = self.margin + stop_length
        self.limit = max(limit, self.margin)
        self._finder = StopFinder(stops, step)
        self._engine, self._exact = Pieces(), Pieces()
        self.engine_length = 0
        self.exact_length = 0
        """Characters of the exact text streamed (the last id's held back)."""
        self.compared = 0
        self.differs: int | None = None
        self._history: deque[str] = deque()
        self._history_size = 0
        self._tail = ""
        """The engine's last characters (as many as the stop string has)."""
        self._tokens: deque[tuple[int, int]] = deque()  # (end of a token's text, its index)
        self._chunks: deque[tuple[int, int]] = deque()  # (start of a chunk's text, its index)
        self._seen: set[str] = set()
        """The stop strings found and seen (each may start a stretch kept)."""
        self._kept: list[_Kept] = []
        """The stretches kept from where the texts may differ (the first difference, each stop
        string's first occurrence): the last one goes on while it is within its limit, which each
        such place moves on; a place past a stretch that reached it starts a new one."""

    @classmethod
    def opened(
        cls, codec: Codec, prompt: Sequence[int], stops: Sequence[str], include: bool, context: int
    ) -> Follower:
        """A follower as :class:`Follower` makes it, or, for a prompt id the tokenizer does not
        have, one that ends with that error.
        """
        try:
            return cls(codec, prompt, stops, include, context)
        except ValueError as error:
            follower = cls(codec, (), (), False, 0)
            follower.error = str(error)
            return follower

    def add(self, ids: Sequence[int], text: str) -> None:
        """The next chunk: its ids and its new text."""
        if self.error is not None:
            return
        for token in ids:
            try:
                state, delta = step(self.state, token)
            except ValueError:
                try:
                    admit_token(self.codec, token, self.ids)
                except ValueError as error:
                    self.error = str(error)
                    return
                raise  # pragma: no cover
            if self.ids:
                self._exact_text(self.last, self.ids - 1)
            self.before, self.state, self.last = self.state, state, delta
            self.ids += 1
        if text:
            self._record(self._chunks, "chunks", self.engine_length, (self.engine_length, self.chunks))
            self.engine_length += len(text)
            if stop_length := self._finder.longest:
                self._tail = (self._tail + text)[-stop_length:]
            self._engine.push(text)
            if self._engine.size >= BLOCK <= self._exact.size:
                self._compare()
        self.chunks += 1

    def _active(self) -> _Kept | None:
        """The stretch still being kept (None: none, or the last one reached its limit)."""
        return self._kept[-1] if self._kept and self._kept[-1].full else None

    def _record(
        self, recent: deque[tuple[int, int]], name: str, position: int, entry: tuple[int, int]
    ) -> None:
        if self.differs is None:
            recent.append(entry)
        if self._kept:
            kept = self._kept[-1]
            if kept.full and position <= kept.limit:
                getattr(kept, name).append(entry)

    def _exact_text(self, text: str, index: int) -> None:
        if not text:
            return
        position = self.exact_length
        self.exact_length += len(text)
        self._record(self._tokens, "tokens", position, (self.exact_length, index))
        self._release(self._finder.add(text))

    def _release(self, text: str) -> None:
        found = self._finder.ends
        for stop, end in found.items() if len(found) > len(self._seen) else ():
            if stop not in self._seen:
                self._seen.add(stop)
                if self.differs is None:
                    self._keep(end - len(stop))
        if text:
            self._exact.push(text)
            if self._exact.size >= BLOCK <= self._engine.size:
                self._compare()

    def _compare(self) -> None:
        count = min(self._engine.size, self._exact.size)
        if not count:
            return
        engine, exact = self._engine.take(count), self._exact.take(count)
        if self.differs is None and engine != exact:
            differs = self.compared + common_prefix(engine, exact)
            self._keep(differs)
            self.differs = differs
        kept = self._active()
        if kept is not None:
            kept.add(engine, exact)
        if self.differs is None:
            self._remember(exact)
        self.compared += count

    def _remember(self, exact: str) -> None:
        history = self._history
        history.append(exact)
        self._history_size += len(exact)
        while self._history_size - len(history[0]) >= self.history_size:
            self._history_size -= len(history.popleft())
        drop = self.compared + len(exact) - self.history_size
        while self._tokens and self._tokens[0][0] <= drop:
            self._tokens.popleft()
        while len(self._chunks) > 1 and self._chunks[1][0] <= drop:
            self._chunks.popleft()

    def _keep(self, point: int) -> None:
        """From here on keep both texts, from ``margin`` before ``point`` (or before what is not
        yet compared).
        """
        active = self._active()
        if active is not None:  # it holds everything from before here: it goes on further
            active.limit = max(active.limit, point + self.limit)
            for recent, kept in ((self._tokens, active.tokens), (self._chunks, active.chunks)):
                last = kept[-1][1] if kept else -1
                kept.extend(entry for entry in recent if entry[1] > last)  # those past its old limit
            return
        history = "".join(self._history)
        base = max(0, min(point, self.compared) - self.margin, self.compared - len(history))
        tokens = [entry for entry in self._tokens if entry[0] > base]
        chunks = list(self._chunks)
        while len(chunks) > 1 and chunks[1][0] <= base:
            chunks.pop(0)
        start = history[len(history) - (self.compared - base) :]
        self._kept.append(_Kept(base, start, point + self.limit, tokens, chunks))

    def end(self, request: Request) -> Followed:
        """The comparison's finding, when the request ended as ``request`` says (its stop and
        finish reason; its ids and text are not read).
        """
        request = attrs.evolve(request, counts=(self.ids, self.chunks))
        stop, finder = request.stop, self._finder
        if self.error is None and stop and stop not in finder.stops:
            self.error = f"its stop string {stop!r} was not known when it opened"
        if self.error is not None:
            return Followed(request, None, self.error)
        self._release(finder.flush())
        drop_last = request.stop_token and self.ids > 0 and not self.include
        untrimmed_tail = self.last + finish(self.state)
        tail = finish(self.before) if drop_last else untrimmed_tail
        engine_rest, exact_rest = self._engine.text(), self._exact.text()
        length = self.exact_length + len(tail)
        stop_end = finder.ends_with(tail)[stop] if stop else None
        if stop and stop_end is not None:
            length = stop_end - (0 if self.include else len(stop))
        if self.differs is not None:
            common = untrimmed_common = self.differs
        else:
            common = self.compared + common_prefix(engine_rest, exact_rest + tail)
            untrimmed_common = self.compared + common_prefix(engine_rest, exact_rest + untrimmed_tail)
        offset = min(common, length)
        if offset == self.engine_length == length:
            return Followed(request, None)
        kept = next(
            (
                k
                for k in reversed(self._kept)
                if (k.base == 0 or k.base + self.margin <= offset)
                and offset <= k.limit  # its tokens' and chunks' positions go as far
                and (k.full or offset + max(self.context, 4) <= min(k.engine_end, k.exact_end))
            ),
            None,
        )
        tokens, chunks = list(self._tokens), list(self._chunks)
        if kept is not None:
            base, full, tokens, chunks = kept.base, kept.full, kept.tokens, kept.chunks
            engine, exact = "".join(kept.engine), "".join(kept.exact)
            if full:
                engine, exact = engine + engine_rest, exact + exact_rest + tail
        elif self.differs is None and (
            self.compared <= self._history_size or self.compared - self._history_size + self.margin <= offset
        ):
            history = "".join(self._history)
            base = self.compared - len(history)
            engine, exact, full = history + engine_rest, history + exact_rest + tail, True
        else:
            message = f"its text differs at {offset:,}, past what was kept of it (not compared)"
            return Followed(request, None, message)
        exact = exact[: length - base]
        at = offset - base
        in_untrimmed = stop is not None and (not stop or finder.ends_with(untrimmed_tail)[stop] is not None)
        facts = Facts(
            length,
            self.engine_length,
            offset,
            stop,
            stop is not None or request.stop_token,
            untrimmed_common == self.engine_length,
            stop is not None and self._tail.endswith(stop),
            stop is not None and (stop == "" or (self.include and stop_end is not None)),
            in_untrimmed,
            near_fffd(exact, engine, at),
        )
        kind = decide(
            facts,
            lambda: full and engine.replace(" ", "") == exact.replace(" ", ""),
            lambda: full and duplicated(exact, engine, at),
        )
        window = slice(max(0, at - self.context), at + self.context)
        chunk = None
        if offset < self.engine_length:
            chunk = chunks[bisect.bisect_right([start for start, _ in chunks], offset) - 1][1]
        return Followed(
            request,
            Difference(
                request,
                kind,
                offset,
                self._token_at(tokens, offset, drop_last),
                exact[window],
                engine[window],
                length,
                self.engine_length,
                chunk,
                looked=None if full or kept is None else min(kept.engine_end, kept.exact_end) - offset,
            ),
        )

    def _token_at(self, tokens: list[tuple[int, int]], offset: int, drop_last: bool) -> int:
        """The index of the output token whose step made the character at ``offset`` certain."""
        tokens = list(tokens)
        if self.last and not drop_last:
            tokens.append((self.exact_length + len(self.last), self.ids - 1))
        at = bisect.bisect_right([end for end, _ in tokens], offset)
        if at < len(tokens):
            return tokens[at][1]
        return max(self.ids - (1 if drop_last else 0) - 1, 0)
