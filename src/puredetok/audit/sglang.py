"""SGLang's native ``/generate`` outputs: ``text``, ``output_ids`` and ``meta_info``.

``meta_info.id`` names the request and ``meta_info.finish_reason`` says how it ended:
``{"type": "stop", "matched": <stop string or token id>}``, ``{"type": "length", ...}`` or
``{"type": "abort", ...}``. SGLang cuts the text before a matched stop string and does not decode
a matched stop token (unless the request asked ``no_stop_trim``). The native output carries no
prompt ids; a record with ``input_ids`` (as the request that produced it had) is read with them.
One object per line, or a JSON array of them (a batched request's answer).

Streamed (``"stream": true``), ``/generate`` answers server-sent events (``http_server.py``:
``data: {chunk}`` lines, ``data: [DONE]`` after the request's last chunk), each chunk the same
``text``, ``output_ids`` and ``meta_info`` (``finish_reason`` None until the last;
``completion_tokens`` the count of ids so far). What a chunk holds depends on the server
(``tokenizer_manager.py``): by default its ``text`` and ``output_ids`` are everything so far;
with ``--incremental-streaming-output`` both are the new part; with older servers'
``--stream-output`` the ``output_ids`` are the new ones and the ``text`` everything so far. It is
told per request from the content: the ids are cumulative when each chunk's ``output_ids`` are as
many as its ``completion_tokens`` (without them: when each chunk's ids begin with the previous
chunk's); the text is cumulative when the ids are, else when at least half the chunks' texts begin with the
previous chunk's text. Where the ids are new ones, the audit tries the other reading of the text
too before it reports a difference (``Request.either``): a stream of new texts that begin with
the one before (``"ab"``, ``"ab"``) reads either way.
"""

from __future__ import annotations

__all__ = ["read_outputs", "read_array", "output_request", "read_stream"]

from collections.abc import Iterable, Iterator
from typing import Any

import attrs
import msgspec

from puredetok.audit.records import Chunk, InputError, Item, Request, Skipped


class _Output(msgspec.Struct):
    text: str
    output_ids: list[int]
    meta_info: dict[str, Any] = {}
    input_ids: list[int] | None = None


class _StreamChunk(msgspec.Struct):
    text: str | None = None
    output_ids: list[int] | None = None
    meta_info: dict[str, Any] = {}
    input_ids: list[int] | None = None
    error: Any = None


_decoder = msgspec.json.Decoder(_Output)
_array = msgspec.json.Decoder(list[_Output])
_chunk = msgspec.json.Decoder(_StreamChunk)


def _ending(meta: dict[str, Any]) -> tuple[str | None, str | None, bool]:
    """The finish reason's type, the stop string and whether a stop token ended it."""
    reason = meta.get("finish_reason")
    kind = reason.get("type") if isinstance(reason, dict) else reason if isinstance(reason, str) else None
    matched = reason.get("matched") if isinstance(reason, dict) else None
    stop = matched if kind == "stop" and isinstance(matched, str) else None
    stop_token = kind == "stop" and type(matched) is int
    return kind, stop, stop_token


def _name(meta: dict[str, Any], line: int) -> str | int:
    name = meta.get("id")
    return name if isinstance(name, str | int) and not isinstance(name, bool) else line


def output_request(output: _Output, file: str, line: int) -> Request:
    """The request of one output."""
    kind, stop, stop_token = _ending(output.meta_info)
    return Request(
        _name(output.meta_info, line),
        line,
        tuple(output.input_ids or ()),
        tuple(output.output_ids),
        output.text,
        kind,
        stop,
        stop_token,
    )


def read_outputs(lines: Iterable[tuple[int, bytes]], file: str) -> Iterator[Item]:
    """Outputs, one JSON object per line (blank lines skipped)."""
    for number, line in lines:
        if not line.strip():
            continue
        try:
            output = _decoder.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            yield InputError(file, number, f"not an SGLang /generate output: {error}")
            continue
        yield output_request(output, file, number)


def read_array(data: bytes, file: str) -> Iterator[Item]:
    """Outputs in one JSON array (each one's place is its item number, from 1)."""
    try:
        outputs = _array.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        yield InputError(file, 1, f"not a JSON array of SGLang /generate outputs: {error}")
        return
    for number, output in enumerate(outputs, 1):
        yield output_request(output, file, number)


@attrs.define
class _Live:
    """A streamed request still running. A chunk's ids are kept only as the reading of them
    needs: the last chunk's, and all of them one after the other until they prove cumulative
    (then every chunk repeats the ones before, and keeping them all would grow as their square).
    """

    name: str | int
    line: int
    prompt: tuple[int, ...]
    texts: list[str] = attrs.field(factory=list)
    last: list[int] = attrs.field(factory=list)
    joined: list[int] | None = attrs.field(factory=list)
    """The chunks' ids one after the other (None once they are known to be cumulative)."""
    sizes: list[int] = attrs.field(factory=list)
    """Each chunk's count of ids."""
    counted: bool = True
    """Each chunk has as many ids as its ``meta_info.completion_tokens`` so far."""
    counts: bool = True
    """Each chunk so far has a ``completion_tokens``."""
    prefixed: bool = True
    """Each chunk's ids so far begin with the previous chunk's."""
    meta: dict[str, Any] = attrs.field(factory=dict)

    def add(self, text: str, ids: list[int], count: Any) -> None:
        """Take a chunk."""
        self.texts.append(text)
        self.prefixed = self.prefixed and ids[: len(self.last)] == self.last
        self.counts = self.counts and type(count) is int
        self.counted = self.counted and self.counts and len(ids) == count
        self.sizes.append(len(ids))
        self.last = ids
        if self.joined is not None:
            self.joined.extend(ids)
            if len(self.sizes) >= 2 and self.counts and self.counted:
                self.joined = None  # two chunks each with all the ids so far: cumulative

    def cumulative_ids(self) -> bool:
        """Each chunk's ids are all the ids so far (see the module's note)."""
        return self.counted if self.counts else self.prefixed


def _cumulative_text(texts: list[str]) -> bool:
    pairs = [(a, b) for a, b in zip(texts, texts[1:]) if a]
    return 2 * sum(b.startswith(a) for a, b in pairs) >= len(pairs)


def _ended(live: _Live) -> Request:
    kind, stop, stop_token = _ending(live.meta)
    either = not live.cumulative_ids()
    if not either or live.joined is None:  # text is cumulative too: SGLang sends no new text with all ids
        output = live.last
        sizes = [b - a for a, b in zip([0, *live.sizes], live.sizes)]
        cumulative = True
    else:
        output = live.joined
        sizes = live.sizes
        cumulative = _cumulative_text(live.texts)
    text = (live.texts[-1] if live.texts else "") if cumulative else "".join(live.texts)
    chunks = tuple(Chunk(text, size) for text, size in zip(live.texts, sizes))
    return Request(
        live.name, live.line, live.prompt, tuple(output), text, kind, stop, stop_token,
        chunks=chunks, cumulative=cumulative, either=either,
    )  # fmt: skip


def read_stream(lines: Iterable[tuple[int, bytes]], file: str) -> Iterator[Item]:
    """Streamed outputs: server-sent events (``data:`` lines; other fields and comments are
    skipped) or one chunk per line, requests told apart by ``meta_info.id``. A request ends with
    its ``finish_reason``; one still running at ``[DONE]`` or at the end of the input ends there.
    """
    live: dict[str | int, _Live] = {}
    for number, raw in lines:
        line = raw.strip()
        if not line or line.startswith((b":", b"event:", b"id:")):
            continue
        if line.startswith(b"data:"):
            line = line[5:].strip()
        if line == b"[DONE]":
            for key in list(live):
                yield _ended(live.pop(key))
            continue
        try:
            chunk = _chunk.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            yield InputError(file, number, f"not an SGLang /generate stream chunk: {error}")
            continue
        if chunk.error is not None:
            yield Skipped(file, number, f"the engine answered an error: {chunk.error}")
            continue
        if chunk.output_ids is None:
            yield InputError(file, number, "a chunk without output_ids")
            continue
        key = _name(chunk.meta_info, 0)
        request = live.get(key)
        if request is None:
            name = _name(chunk.meta_info, number)
            request = live[key] = _Live(name, number, tuple(chunk.input_ids or ()))
        request.add(chunk.text or "", chunk.output_ids, chunk.meta_info.get("completion_tokens"))
        request.meta = chunk.meta_info
        if chunk.meta_info.get("finish_reason") is not None:
            yield _ended(live.pop(key))
    for request in live.values():
        yield _ended(request)
