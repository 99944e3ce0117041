"""SGLang's native ``/generate`` outputs (``text``, ``output_ids``, ``meta_info``), whole or
streamed.

A stream's chunks hold the new text or everything so far, and the new ids or all so far,
depending on the server: the reading is told per request from the content (docs/audit.md,
"SGLang's streams: what a chunk holds"), by a look ahead (:class:`_Evidence`, bounded by one
chunk) that also lets a request be compared as it streams (:mod:`puredetok_audit._follow`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs
import msgspec

from puredetok_audit._compare import Auditor
from puredetok_audit._follow import Followed, Follower
from puredetok_audit._records import Chunk, InputError, Item, Lines, Request, failed, stream_data


class _Output(msgspec.Struct):
    text: str
    output_ids: list[int]
    meta_info: dict[str, Any] = {}
    input_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None


class _StreamChunk(msgspec.Struct):
    text: str | None = None
    output_ids: list[int] | None = None
    meta_info: dict[str, Any] = {}
    input_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    error: Any = None


_decoder = msgspec.json.Decoder(_Output | list[_Output])
_chunk = msgspec.json.Decoder(_StreamChunk)


def _head(name: str | int, line: int, meta: dict[str, Any]) -> Request:
    """A request's record but its ids and text: how its ``meta_info`` says it ended."""
    reason = meta.get("finish_reason")
    kind = reason.get("type") if isinstance(reason, dict) else reason if isinstance(reason, str) else None
    matched = reason.get("matched") if isinstance(reason, dict) else None
    stop = matched if kind == "stop" and isinstance(matched, str) else None
    return Request(name, line, (), (), "", kind, stop, kind == "stop" and type(matched) is int)


def _name(meta: dict[str, Any], line: int) -> str | int:
    name = meta.get("id")
    return name if isinstance(name, str | int) and not isinstance(name, bool) else line


def output_request(output: _Output, file: str, line: int) -> Request:
    """The request of one output."""
    return attrs.evolve(
        _head(_name(output.meta_info, line), line, output.meta_info),
        prompt_ids=tuple(output.input_ids or output.prompt_token_ids or ()),
        output_ids=tuple(output.output_ids),
        text=output.text,
    )


def read_outputs(lines: Iterable[tuple[int, bytes]], file: str) -> Iterator[Item]:
    """Outputs, one JSON object per line (blank lines skipped)."""
    for number, line in lines:
        if not line.strip():
            continue
        try:
            decoded = _decoder.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            record = msgspec.json.decode(line) if isinstance(error, msgspec.ValidationError) else None
            failure = record.get("error") if isinstance(record, dict) else None
            message = f"not an SGLang /generate output: {error}"
            yield from failed({}, file, number, failure) if failure else [InputError(file, number, message)]
            continue
        for output in decoded if isinstance(decoded, list) else [decoded]:  # a batch's answer is a list
            yield output_request(output, file, number)


@attrs.define
class _Evidence:
    """What tells how a stream's chunks are read (see the module's note), taken as they come: the
    last chunk's ids and text, the longest text, counts and flags; bounded by one chunk whatever
    the stream's length.
    """

    last: list[int] = attrs.field(factory=list)
    text: str = ""
    longest: str = ""
    chunks: int = 0
    counted: bool = True
    """Each chunk has as many ids as its ``meta_info.completion_tokens`` so far."""
    counts: bool = True
    """Each chunk so far has a ``completion_tokens``."""
    prefixed: bool = True
    """Each chunk's ids so far begin with the previous chunk's."""
    joined: bool = True
    """The chunks' ids are still joined: two chunks have not yet each had all the ids so far
    (from then on, the request's ids are the last chunk's)."""
    pairs: int = 0
    """Chunks after a chunk with a text."""
    continued: int = 0
    """Of those, the chunks whose text begins with the previous one's."""
    chain: bool = True
    """Each text so far begins with, or is the beginning of, the longest one."""
    meta: dict[str, Any] = attrs.field(factory=dict)

    def add(self, text: str, ids: list[int], meta: dict[str, Any]) -> None:
        """Take a chunk."""
        if self.text:
            self.pairs += 1
            self.continued += text.startswith(self.text)
        if text.startswith(self.longest):
            self.longest = text
        elif not self.longest.startswith(text):
            self.chain = False
        count = meta.get("completion_tokens")
        self.prefixed = self.prefixed and ids[: len(self.last)] == self.last
        self.counts = self.counts and type(count) is int
        self.counted = self.counted and self.counts and len(ids) == count
        self.chunks += 1
        self.joined = self.joined and not (self.chunks >= 2 and self.counts and self.counted)
        self.last, self.text, self.meta = ids, text, meta

    def settled(self) -> _Evidence:
        """Itself once the request ended, without the last chunk's ids and texts: ``chain`` then
        says whether each text is the beginning of the last one.
        """
        self.chain = self.chain and len(self.text) == len(self.longest)
        self.last, self.text, self.longest = [], "", ""
        return self

    def reading(self) -> tuple[bool, bool, bool]:
        """Whether the request's ids are the last chunk's (else all chunks' joined), whether its
        text is the last chunk's (else all chunks' joined), and whether the other reading of the
        texts is tried too (``Request.either``).
        """
        either = not (self.counted if self.counts else self.prefixed)
        if not either or not self.joined:  # SGLang sends no new text with all the ids
            return True, True, either
        return False, 2 * self.continued >= self.pairs, True


@attrs.define
class _Live:
    """A streamed request still running, held whole. A chunk's ids are kept only as the reading
    of them needs: all of them one after the other until they prove cumulative (then every chunk
    repeats the ones before, and keeping them all would grow as their square).
    """

    name: str | int
    line: int
    prompt: tuple[int, ...]
    evidence: _Evidence = attrs.field(factory=_Evidence)
    texts: list[str] = attrs.field(factory=list)
    joined: list[int] | None = attrs.field(factory=list)
    sizes: list[int] = attrs.field(factory=list)

    def add(self, text: str, ids: list[int], meta: dict[str, Any]) -> None:
        """Take a chunk."""
        self.evidence.add(text, ids, meta)
        self.texts.append(text)
        self.sizes.append(len(ids))
        if self.joined is not None:
            self.joined.extend(ids)
            if not self.evidence.joined:
                self.joined = None


def _ended(live: _Live) -> Request:
    evidence = live.evidence
    last, cumulative, either = evidence.reading()
    if last or live.joined is None:
        output = evidence.last
        sizes = [b - a for a, b in zip([0, *live.sizes], live.sizes)]
    else:
        output = live.joined
        sizes = live.sizes
    text = (live.texts[-1] if live.texts else "") if cumulative else "".join(live.texts)
    chunks = tuple(Chunk(text, size) for text, size in zip(live.texts, sizes))
    head = _head(live.name, live.line, evidence.meta)
    return attrs.evolve(
        head,
        prompt_ids=live.prompt,
        output_ids=tuple(output),
        text=text,
        chunks=chunks,
        cumulative=cumulative,
        either=either,
    )


_Fate = tuple[int, _Evidence]
"""How the look ahead saw a request end: the line, and what its chunks told (settled)."""

_END_OF_INPUT = 1 << 62


def _chunks(lines: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, _StreamChunk | bytes | str]]:
    """The stream's chunks: a chunk, ``b"[DONE]"``, or why a line is not one."""
    for number, line in stream_data(lines):
        if line == b"[DONE]":
            yield number, line
            continue
        try:
            yield number, _chunk.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            yield number, f"not an SGLang /generate stream chunk: {error}"


def _look_ahead(lines: Iterable[tuple[int, bytes]]) -> dict[str | int, deque[_Fate]]:
    """Each request's ending and reading, in the order of the lines (see :func:`read_stream`)."""
    fates: dict[str | int, deque[_Fate]] = {}
    live: dict[str | int, _Evidence] = {}
    for number, chunk in _chunks(lines):
        if chunk == b"[DONE]":
            for key in list(live):
                fates.setdefault(key, deque()).append((number, live.pop(key).settled()))
        if not isinstance(chunk, _StreamChunk) or chunk.error is not None or chunk.output_ids is None:
            continue
        key = _name(chunk.meta_info, 0)
        evidence = live.setdefault(key, _Evidence())
        evidence.add(chunk.text or "", chunk.output_ids, chunk.meta_info)
        if chunk.meta_info.get("finish_reason") is not None:
            fates.setdefault(key, deque()).append((number, live.pop(key).settled()))
    for key, evidence in live.items():
        fates.setdefault(key, deque()).append((_END_OF_INPUT, evidence.settled()))
    return fates


@attrs.define
class _Following:
    """A streamed request compared as it comes, in each reading of its texts that the report may
    need (the one reported first): a text read as the whole text so far is fed by what it adds to
    the longest before it, which the look ahead saw is a reading that loses nothing.
    """

    head: Request
    """Its name, line and ending, as the look ahead saw them."""
    ends: int
    last: bool
    """Its ids are the last chunk's (each chunk's begin with the previous one's)."""
    readings: list[tuple[Follower, bool]]
    """Each reading's comparison, and whether it reads the texts as the whole text so far."""
    ids: int = 0
    longest: int = 0

    def add(self, text: str, ids: list[int]) -> None:
        """Take a chunk."""
        new = ids[self.ids :] if self.last else ids
        self.ids = len(ids)
        added = text[self.longest :]
        self.longest = max(self.longest, len(text))
        for follower, cumulative in self.readings:
            follower.add(new, added if cumulative else text)
        if len(self.readings) > 1 and self.readings[1][0].differs is not None:
            del self.readings[1]  # the other reading differs: only the first's report is given


def _follow(
    name: str | int, number: int, prompt: Sequence[int], fates: dict[str | int, deque[_Fate]], key: str | int,
    auditor: Auditor,
) -> _Following | None:  # fmt: skip
    """The request's comparison as it streams, if the look ahead saw a reading that can be."""
    queue = fates.get(key)
    while queue and queue[0][0] < number:
        queue.popleft()
    if not queue:
        return None
    line, evidence = queue[0]
    last, cumulative, either = evidence.reading()
    chain = evidence.chain
    if (last and not evidence.prefixed) or (cumulative and not chain):
        return None
    head = _head(name, number, evidence.meta)
    codec = auditor.codec(head)
    if not codec.exact:
        return None
    readings = [cumulative, *([not cumulative] if either and (cumulative or chain) else [])]
    include, context = auditor.include_stop(head), auditor.options.context
    followers = [(Follower.opened(codec, prompt, (head.stop or "",), include, context), r) for r in readings]
    return _Following(head, line, last, followers)


def _close(request: _Live | _Following, file: str, number: int) -> Item | Followed:
    if isinstance(request, _Live):
        return _ended(request)
    if number != request.ends:
        message = f"request {request.head.id}: its end was not where a first reading saw it"
        return InputError(file, request.head.line, message)
    return _found(request)


def _found(request: _Following) -> Followed:
    """The report of the first reading, or none where the other finds the texts equal."""
    found = [follower.end(request.head) for follower, _ in request.readings]
    if found[0].difference is not None and any(f.difference is None and f.error is None for f in found[1:]):
        return Followed(found[0].request, None)
    return found[0]


def read_stream(
    lines: Lines, file: str, auditor: Auditor | None = None, again: Lines | None = None
) -> Iterator[Item | Followed]:
    """Streamed outputs: server-sent events (``data:`` lines) or one chunk per line, requests told
    apart by ``meta_info.id``, each ending with its ``finish_reason``, at ``[DONE]`` or at the end
    of the input. With an ``auditor`` and ``again`` (the same lines a second time), the requests
    that can be are compared as they stream (:class:`Followed`); one whose codec is not exact, or
    whose ids or texts the look ahead saw are not each the start of the next, is held whole.
    """
    fates = None
    if auditor is not None and again is not None:
        fates = _look_ahead(lines)
        lines = again
    live: dict[str | int, _Live | _Following] = {}
    dead: set[str | int] = set()
    for number, chunk in _chunks(lines):
        if chunk == b"[DONE]":
            for key in list(live):
                yield _close(live.pop(key), file, number)
            dead.clear()
            continue
        if isinstance(chunk, str | bytes):
            yield InputError(file, number, str(chunk))
            continue
        if chunk.error is not None:  # the server then sends [DONE]
            yield from failed(live, file, number, chunk.error, dead)
            continue
        if chunk.output_ids is None:
            yield InputError(file, number, "a chunk without output_ids")
            continue
        key = _name(chunk.meta_info, 0)
        if key in dead:
            continue
        request = live.get(key)
        if request is None:
            name, prompt = (
                _name(chunk.meta_info, number),
                tuple(chunk.input_ids or chunk.prompt_token_ids or ()),
            )
            following = (
                None
                if fates is None or auditor is None
                else _follow(name, number, prompt, fates, key, auditor)
            )
            request = live[key] = following or _Live(name, number, prompt)
        if isinstance(request, _Live):
            request.add(chunk.text or "", chunk.output_ids, chunk.meta_info)
        else:
            request.add(chunk.text or "", chunk.output_ids)
        if chunk.meta_info.get("finish_reason") is not None:
            yield _close(live.pop(key), file, number)
    for request in live.values():
        yield _close(request, file, _END_OF_INPUT)
