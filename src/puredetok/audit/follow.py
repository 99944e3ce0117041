"""One request compared as it streams: memory bounded whatever the request's length.

:class:`Follower` takes a streamed request's chunks (their ids and new text) as they come. The
exact text is streamed through the core (an exact codec: its stream is ``decode``, contract C
with the prompt), the text of the last id held back (a stop token's text may be cut), and
compared with the engine's text as both arrive. It keeps only what one text has that the other
has not reached yet, the last characters compared (enough for the report's windows and the
kinds' looks back), and the positions of the recent tokens and chunks. The stop string that cuts
the exact text must be known when the request opens (a stream says it only in its last chunk:
its reader looks ahead for it); its first occurrence is searched in steps of :data:`STEP`
characters before the text is compared, so that a cut is known before the comparison passes it.

From the first place where the texts differ, or where the stop string starts, on, the rest of
both texts is kept too (up to :data:`SUFFIX_LIMIT` characters past that place): ``cleanup
spacing`` and ``duplicated text`` compare the texts after the difference. The report is the one
:meth:`puredetok.audit.compare.Auditor.check` gives from the whole texts (the same kind, offset,
token, windows, lengths, chunk); where the texts run on past the limit, those two kinds are
looked for in the part kept only, and the difference says so (:attr:`Difference.looked`).
"""

from __future__ import annotations

__all__ = ["STEP", "SUFFIX_LIMIT", "Follower", "Followed"]

import bisect
from collections import deque
from collections.abc import Sequence

import attrs

from puredetok.audit.compare import DUPLICATE_LIMIT, Difference, Facts, decide, duplicated, near_fffd
from puredetok.audit.records import Request
from puredetok.core import Codec, admit_token, finish, start, step
from puredetok.replay.incremental import Pieces, common_prefix

STEP = 4096
"""The exact text is searched for the stop string in steps of this many characters."""

SUFFIX_LIMIT = 1 << 16
"""Characters of each text kept past the first difference (or the stop string's start)."""


@attrs.frozen
class Followed:
    """A request compared as it streamed: the record (without its ids and text) and what the
    comparison found (None: equal), or the error that stopped it.
    """

    request: Request
    difference: Difference | None
    error: str | None = None


class _Cutter:
    """The exact text held until it has been searched for the stop string (in steps)."""

    def __init__(self, stop: str | None, step: int) -> None:
        self.stop, self.step = stop, step
        self.pending: list[str] = []
        self.size = 0
        self.carry = ""
        self.searched = 0
        self.end: int | None = None
        """Where the stop string first completes (the position just after it)."""

    def add(self, text: str) -> str:
        """Take ``text``; the text now searched (to be compared)."""
        if not self.stop or self.end is not None:
            return text
        self.pending.append(text)
        self.size += len(text)
        return self.flush() if self.size >= self.step else ""

    def flush(self) -> str:
        """Search and give out all the text held."""
        text = "".join(self.pending)
        self.pending, self.size = [], 0
        if not self.stop or self.end is not None:
            return text
        self.end = self._find(text)
        keep = len(self.stop) - 1
        window = self.carry + text
        self.carry = window[-keep:] if keep else ""
        self.searched += len(text)
        return text

    def _find(self, text: str) -> int | None:
        assert self.stop
        at = (self.carry + text).find(self.stop)
        return None if at < 0 else self.searched - len(self.carry) + at + len(self.stop)

    def end_with(self, tail: str) -> int | None:
        """Where the stop string first completes in everything given out, followed by ``tail``."""
        if not self.stop or self.end is not None:
            return self.end
        return self._find(tail)


class _Kept:
    """Both texts from ``base`` on, once something differs (up to ``limit``, an absolute end)."""

    def __init__(self, base: int, start: str, limit: int) -> None:
        self.base, self.limit = base, limit
        self.engine, self.exact = [start], [start]
        self.engine_end = self.exact_end = base + len(start)
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
    """One request's comparison as it streams (see the module). ``stop``: the stop string the
    record says ended it; ``stop_token``: the last id ended it as a stop or EOS token; ``include``:
    the engine kept it; ``context``: characters shown on each side of a difference; ``step`` and
    ``limit``: see :data:`STEP` and :data:`SUFFIX_LIMIT` (the windows and the looks back need
    ``limit`` to be some hundred characters at least, which it is then made). Raises ValueError for a prompt id the
    tokenizer does not have.
    """

    def __init__(
        self,
        codec: Codec,
        prompt: Sequence[int],
        stop: str | None,
        stop_token: bool,
        include: bool,
        context: int,
        *,
        step: int = STEP,
        limit: int = SUFFIX_LIMIT,
    ) -> None:
        self.codec, self.stop, self.include, self.context = codec, stop, include, context
        self.stop_token = stop_token
        self.state = start(codec, prompt)
        self.before = self.state
        self.last = ""
        """The text of the last id (held back: a stop token's may be cut)."""
        self.ids = 0
        self.chunks = 0
        self.error: str | None = None
        stop_length = len(stop or "")
        self.margin = max(context, 4) + 2 * DUPLICATE_LIMIT + 8 + stop_length
        self.history_size = self.margin + stop_length
        self.limit = max(limit, self.margin)
        self._cutter = _Cutter(stop, step)
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
        self._kept: _Kept | None = None

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
            if self._records(self.engine_length):
                self._chunks.append((self.engine_length, self.chunks))
            self.engine_length += len(text)
            if self.stop:
                self._tail = (self._tail + text)[-len(self.stop) :]
            self._engine.push(text)
            self._compare()
        self.chunks += 1

    def _records(self, position: int) -> bool:
        return self._kept is None or position < self._kept.limit

    def _exact_text(self, text: str, index: int) -> None:
        if not text:
            return
        self.exact_length += len(text)
        if self._records(self.exact_length - len(text)):
            self._tokens.append((self.exact_length, index))
        self._release(self._cutter.add(text))

    def _release(self, text: str) -> None:
        end = self._cutter.end
        if end is not None and self._kept is None:
            self._keep(end - len(self.stop or ""))
        if text:
            self._exact.push(text)
            self._compare()

    def _compare(self) -> None:
        count = min(self._engine.size, self._exact.size)
        if not count:
            return
        engine, exact = self._engine.take(count), self._exact.take(count)
        if self.differs is None and engine != exact:
            self.differs = self.compared + common_prefix(engine, exact)
            if self._kept is None:
                self._keep(self.differs)
        if self._kept is not None:
            self._kept.add(engine, exact)
        else:
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
        history = "".join(self._history)
        base = max(0, min(point, self.compared) - self.margin, self.compared - len(history))
        self._kept = _Kept(base, history[len(history) - (self.compared - base) :], point + self.limit)
        self._history.clear()

    def end(self, request: Request) -> Followed:
        """The comparison's finding, when the request ended as ``request`` says (its stop and
        finish reason; its ids and text are not read).
        """
        request = attrs.evolve(request, counts=(self.ids, self.chunks))
        if self.error is not None:
            return Followed(request, None, self.error)
        self._release(self._cutter.flush())
        drop_last = self.stop_token and self.ids > 0 and not self.include
        untrimmed_tail = self.last + finish(self.state)
        tail = finish(self.before) if drop_last else untrimmed_tail
        engine_rest, exact_rest = self._engine.text(), self._exact.text()
        stop = self.stop
        length = self.exact_length + len(tail)
        stop_end = self._cutter.end_with(tail)
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
        kept = self._kept
        if kept is None:
            history = "".join(self._history)
            base = self.compared - len(history)
            engine, exact, full = history + engine_rest, history + exact_rest + tail, True
        else:
            base, full = kept.base, kept.full
            engine, exact = "".join(kept.engine), "".join(kept.exact)
            if full:
                engine, exact = engine + engine_rest, exact + exact_rest + tail
        exact = exact[: length - base]
        at = offset - base
        in_untrimmed = stop is not None and (
            stop == "" or self._cutter.end is not None or self._cutter.end_with(untrimmed_tail) is not None
        )
        facts = Facts(
            length,
            self.engine_length,
            offset,
            stop,
            stop is not None or self.stop_token,
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
            starts = [start for start, _ in self._chunks]
            chunk = self._chunks[bisect.bisect_right(starts, offset) - 1][1]
        return Followed(
            request,
            Difference(
                request,
                kind,
                offset,
                self._token_at(offset, drop_last),
                exact[window],
                engine[window],
                length,
                self.engine_length,
                chunk,
                looked=None if full or kept is None else kept.limit - offset,
            ),
        )

    def _token_at(self, offset: int, drop_last: bool) -> int:
        """The index of the output token whose step made the character at ``offset`` certain."""
        tokens = list(self._tokens)
        if self.last and not drop_last:
            tokens.append((self.exact_length + len(self.last), self.ids - 1))
        at = bisect.bisect_right([end for end, _ in tokens], offset)
        if at < len(tokens):
            return tokens[at][1]
        return max(self.ids - (1 if drop_last else 0) - 1, 0)
