"""Which format a file holds (by its content), the shards it is cut into, and auditing a shard.

A shard is a stretch of a file read on its own (whole lines, a stream's cut after ``data:
[DONE]``; a Parquet row group; a whole file); a compressed file is one shard, audited in
stretches (:func:`audit_stretches`). docs/audit.md ("Scale") says how.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import msgspec

from puredetok_audit._compare import PARSER_SPLIT, Auditor, Difference
from puredetok_audit._files import Decompressed, stretches
from puredetok_audit._files.text import binary
from puredetok_audit._follow import Followed
from puredetok_audit._formats import rollouts, sglang, trace, vllm
from puredetok_audit._records import Columns, InputError, Item, Request, Skipped
from puredetok_audit._report import Tally, difference_record, error_record, past_vocabulary, unrelated

FORMATS = ("vllm", "vllm-stream", "sglang", "sglang-stream", "rollouts", "trace")
"""The input formats: vLLM's whole responses and streamed chunks, SGLang's ``/generate`` outputs
whole and streamed, rollout tables (JSON lines or Parquet), puredetok's traces."""

STREAMS = frozenset({"vllm-stream", "sglang-stream"})
"""The streamed formats (a shard of one ends after a ``data: [DONE]`` line)."""

SHARD_BYTES = 4 << 20
"""About how many bytes of lines a shard holds."""

_HEAD = 1 << 16
_BOM = b"\xef\xbb\xbf"
_ERROR_KEYS = frozenset({"error", "object", "message", "type", "param", "code"})
_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])
_TRACE_EVENT = frozenset({"uid", "tokens", "prompt", "options", "finished", "abort"})


@attrs.frozen
class Shard:
    """A stretch of one file that is read and audited on its own."""

    path: str
    format: str
    layout: str
    """``"lines"`` (bytes ``start`` to ``end``), ``"array"`` or ``"whole"`` (the whole file),
    ``"parquet"`` (row group ``start``)."""
    start: int = 0
    end: int = 0
    line: int = 1
    """The number of its first line."""
    row: int = 0
    """The index of its first row (for tables)."""
    index: int = 0
    """Its place among the file's shards."""
    compression: str | None = None
    """A compressed file's compression (the shard is then the whole file, ``end`` its size)."""
    stretch: int = SHARD_BYTES
    """About how many bytes of a compressed file's lines each of its stretches holds."""
    first_stretch: int = 0
    stretch_step: int = 1
    """The stretches of a compressed file's lines it audits: ``first_stretch``, then every
    ``stretch_step``-th (the file read whole each time): several shards can share one file."""


@attrs.frozen
class ShardResult:
    """What auditing a shard found: the report's objects, in input order, and the counts."""

    index: int
    records: list[dict[str, Any]]
    tally: Tally
    timing: Any = None
    """Where its time went, on Ray (a :class:`puredetok_audit._distributed.Timing`); None locally."""
    part: int = 0
    """The number of its stretch in its file (0 but for a compressed file's lines)."""
    last: bool = True
    """Whether that stretch is the file's last."""


def _first_line(path: str, data: bool = False) -> tuple[int, bytes]:
    """The first line that is not blank nor an engine's error answer, and its number (with
    ``data``: the first ``data:`` line's value, the first chunk of a stream of server-sent
    events); ``(0, b"")`` if there is none.
    """
    for number, raw in enumerate(Decompressed.open(path).lines(), 1):
        line = raw.removeprefix(_BOM).strip()
        if data and (not line.startswith(b"data:") or line[5:].strip() == b"[DONE]"):
            continue
        line = line[5:].strip() if data else line
        record = _json(line) if line.startswith(b"{") else None
        if line and not (isinstance(record, dict) and record and set(record) <= _ERROR_KEYS):
            return number, line
    return 0, b""


def _json(data: bytes) -> Any:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return None


def _json_error(data: bytes) -> str:
    """Why ``data`` is not JSON."""
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError as error:
        return str(error)
    return "it is"


def _head(path: str) -> tuple[Decompressed, bytes, bytes | None]:
    """The file, its first bytes (decompressed), and those bytes without leading blanks (None for
    Parquet). Raises ValueError for a file with nothing to audit in it (empty, or its compressed
    data broken before any), binary data, or compressed Parquet.
    """
    reading = Decompressed.open(path)
    head = reading.head(_HEAD).removeprefix(_BOM)
    packed = "" if reading.compression is None else f"{reading.compression}-compressed "
    if head.startswith(b"PAR1"):
        if packed:  # Parquet compresses its pages itself
            raise ValueError(f"{packed}Parquet: not read (decompress it first)")
        return reading, head, None
    body = head.lstrip()
    if not body and reading.error is not None:
        raise ValueError(reading.error)
    if not body:
        holds = f"is {packed}and holds nothing" if packed else "is empty"
        raise ValueError(f"the file {holds}: nothing to audit")
    if binary(body):
        raise ValueError(f"{packed}binary data: not JSON lines, a JSON array nor Parquet")
    return reading, head, body


def detect_format(path: str, format: str | None = None) -> tuple[str, str]:
    """The format of a file (``format`` if given, else told from its decompressed content) and
    its layout. Raises ValueError for a format that cannot be told.
    """
    reading, head, body = _head(path)
    if body is None:
        return format or "rollouts", "parquet"
    try:
        format = format or _told(path, head, body)
    except ValueError as error:
        if reading.error is None:
            raise
        raise ValueError(f"{reading.error} ({error})") from None
    if format == "trace":
        return format, "whole"
    if (
        body.startswith(b"[")
        and format in ("vllm", "sglang")
        and not isinstance(_json(_first_line(path)[1]), list)
    ):
        return format, "array"  # (a list a line: a batch's answers, one per line)
    return format, "lines"


def _told(path: str, head: bytes, body: bytes) -> str:
    """The format of a file that begins with ``head`` (``body``: its blanks off)."""
    if body.startswith(b"["):
        if b'"output_ids"' in head:
            return "sglang"
        if b'"choices"' in head:
            return "vllm"
        raise ValueError("a JSON array of neither vLLM responses nor SGLang outputs; give --format")
    number, line = _first_line(path)
    first = _json(line)
    if line.startswith((b"data:", b"event:", b":")):
        chunk = _json(_first_line(path, data=True)[1])
        sglang = isinstance(chunk, dict) and "output_ids" in chunk and "choices" not in chunk
        return "sglang-stream" if sglang else "vllm-stream"
    if not number:
        raise ValueError(
            "every record is an engine's error answer: no response tells the format (give --format "
            "to count them as skipped)"
        )
    if first is None:
        raise ValueError(
            f"line {number} is not JSON ({_json_error(line)}): cannot tell the format (give --format "
            "to read the lines after it)"
        )
    if not isinstance(first, dict):
        raise ValueError(
            f"line {number} is a JSON {type(first).__name__}, not an object: cannot tell the format "
            "(give --format)"
        )
    if "choices" in first:  # a completion chunk's object is a whole one's, but it is not finished
        chunks = first["choices"] if isinstance(first["choices"], list) else []
        unfinished = any(isinstance(c, dict) and c.get("finish_reason", "") is None for c in chunks)
        chunk = str(first.get("object", "")).endswith(".chunk") or unfinished
        return "vllm-stream" if chunk else "vllm"
    if "output_ids" in first and isinstance(first.get("meta_info"), dict):  # a chunk: not finished
        return "sglang-stream" if first["meta_info"].get("finish_reason", "") is None else "sglang"
    if ("uid" in first and set(first) <= _TRACE_EVENT) or (first and set(first) <= {"tokenizer", "options"}):
        return "trace"
    return "rollouts"


def shards_of(path: str, format: str | None = None, size: int = SHARD_BYTES) -> list[Shard]:
    """The shards of a file (its format detected unless given). Raises ValueError for a file
    whose format cannot be told, OSError for one that cannot be read.
    """
    format, layout = detect_format(path, format)
    if layout == "parquet":
        return [
            Shard(path, format, layout, group, 0, row + 1, row, index)
            for index, (group, row) in enumerate(rollouts.row_groups(path))
        ]
    compression = Decompressed.open(path).compression
    if compression is not None:
        return [Shard(path, format, layout, 0, os.path.getsize(path), compression=compression, stretch=size)]
    if layout != "lines":
        return [Shard(path, format, layout)]
    shards: list[Shard] = []
    start, line, row, position, number, rows = 0, 1, 0, 0, 0, 0
    stream = format in STREAMS
    with open(path, "rb") as source:
        for text in source:
            position += len(text)
            number += 1
            rows += bool(text.strip())
            if position - start >= size and (not stream or text.strip() == b"data: [DONE]"):
                shards.append(Shard(path, format, layout, start, position, line, row, len(shards)))
                start, line, row = position, number + 1, rows
    if position > start or not shards:
        shards.append(Shard(path, format, layout, start, position, line, row, len(shards)))
    return shards


def _lines(shard: Shard) -> Iterator[tuple[int, bytes]]:
    with open(shard.path, "rb") as source:
        source.seek(shard.start)
        position, number = shard.start, shard.line
        for line in source:
            if position >= shard.end:
                return
            yield number, line.removeprefix(_BOM) if position == 0 else line
            position += len(line)
            number += 1


_Lines = Callable[[], Iterator[tuple[int, bytes]]]
"""The numbered lines of a shard, read again at each call."""


def _items(
    shard: Shard, auditor: Auditor, columns: Columns, lines: _Lines, read: Callable[[], bytes]
) -> Iterator[Item | Followed]:
    """The shard's requests, from ``lines`` (a format read whole: the whole file's) or, for a
    JSON array, ``read`` (the whole file's bytes).
    """
    file, format = shard.path, shard.format
    if shard.layout == "parquet":
        return rollouts.read_parquet(shard.path, shard.start, shard.row, columns, file)
    if shard.layout == "array":
        data = read().removeprefix(_BOM)
        try:  # each item read as a line numbered by its place, so that a bad one is named alone
            items = [(number, bytes(raw)) for number, raw in enumerate(_ITEMS.decode(data), 1)]
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            return iter([InputError(file, 1, f"not a JSON array: {error}")])
        return vllm.read_responses(items, file) if format == "vllm" else sglang.read_outputs(items, file)
    if format == "trace":
        return trace.read_trace_requests(lines(), auditor.tokenizer, file, auditor.replay_codecs, auditor)
    if format == "vllm":
        return vllm.read_responses(lines(), file)
    if format == "vllm-stream":
        return vllm.read_stream(lines(), file, auditor, lines())
    if format == "sglang":
        return sglang.read_outputs(lines(), file)
    if format == "sglang-stream":
        return sglang.read_stream(lines(), file, auditor, lines())
    return rollouts.read_json_rows(lines(), columns, file, shard.row)


def audit_shard(shard: Shard, auditor: Auditor, columns: Columns | None = None) -> ShardResult:
    """Audit every request of a shard (a table's columns named by ``columns``): its stretches'
    findings joined (:func:`audit_stretches`).
    """
    results = list(audit_stretches(shard, auditor, columns))
    if len(results) == 1:
        return results[0]
    tally, records = Tally(), []
    for result in results:
        tally.add(result.tally)
        records += result.records
    return ShardResult(shard.index, records, tally)


def audit_stretches(shard: Shard, auditor: Auditor, columns: Columns | None = None) -> Iterator[ShardResult]:
    """Audit every request of a shard, the findings given a stretch at a time: a compressed
    file's lines in stretches of about ``shard.stretch`` bytes, cut as :func:`shards_of` cuts a
    plain file (so that memory holds one stretch's findings, whatever the file's size), those the
    shard takes (:attr:`Shard.first_stretch`); any other shard in one, its stretch 0. An error of
    the compressed data (the file cut short, corrupt) is the last finding of the last stretch, at
    the line it was met in, after those of every line read before it.
    """
    columns = columns or Columns()
    whole = shard.layout != "lines" or shard.format == "trace"
    if shard.first_stretch and (whole or shard.compression is None):
        return  # a shard read in one is its stretch 0
    reading = Decompressed(shard.path, shard.compression)
    if whole:
        numbered = enumerate(reading.lines(), 1)
        items = _items(shard, auditor, columns, lambda: numbered, reading.read)
        yield _ended(_audited(shard, auditor, items), reading)
        return
    if shard.compression is None:
        lines = functools.partial(_lines, shard)
        yield _audited(shard, auditor, _items(shard, auditor, columns, lines, reading.read))
        return
    ends = (lambda line: line.strip() == b"data: [DONE]") if shard.format in STREAMS else None
    row = 0
    for number, part in enumerate(stretches(reading.lines(), shard.stretch, ends)):
        if number >= shard.first_stretch and (number - shard.first_stretch) % shard.stretch_step == 0:
            stretch = attrs.evolve(shard, end=part.size, line=part.first, row=row)
            found = _audited(stretch, auditor, _items(stretch, auditor, columns, part.lines, reading.read))
            result = attrs.evolve(found, part=number, last=part.last)
            yield _ended(result, reading) if part.last else result
        row += part.rows


def _ended(result: ShardResult, reading: Decompressed) -> ShardResult:
    """The result with the error that ended the compressed data, if one did, as its last finding."""
    if reading.error is None:
        return result
    result.tally.errors += 1  # a file read whole (a JSON array) is named at its line 1
    result.records.append(error_record(InputError(reading.path, max(reading.line, 1), reading.error)))
    return result


def _audited(shard: Shard, auditor: Auditor, items: Iterator[Item | Followed]) -> ShardResult:
    tally, records = Tally(), []
    for item in items:
        if isinstance(item, Skipped):
            tally.skipped += 1
            continue
        if isinstance(item, InputError):
            tally.errors += 1
            tally.past_vocabulary += past_vocabulary(item.message)
            records.append(error_record(item))
            continue
        difference: Difference | None = None
        error: str | None = None
        if isinstance(item, Followed):
            request, difference, error = item.request, item.difference, item.error
        else:
            request = item
            try:
                difference = auditor.check(item)
            except ValueError as raised:
                error = str(raised)
        if error is not None:
            tally.errors += 1
            tally.past_vocabulary += past_vocabulary(error)
            message = f"request {request.id}: {error}"
            records.append(error_record(InputError(shard.path, request.line, message)))
            continue
        cut = request.finish_reason == "abort" or (request.finish_reason is None and shard.format in STREAMS)
        if cut and difference is not None and difference.kind == "lost tail":  # the rest may be held
            tally.skipped += 1
            continue
        _count(tally, request, difference is not None and difference.chunk is not None)
        tally.dropped += difference is not None and difference.dropped is not None
        if difference is not None and difference.kind == PARSER_SPLIT:
            tally.unjoinable += 1
            records.append(difference_record(difference, shard.path, shard.format))
        elif difference is not None:
            tally.differing += 1
            tally.unrelated += unrelated(difference)
            tally.kinds[difference.kind] += 1
            records.append(difference_record(difference, shard.path, shard.format))
    return ShardResult(shard.index, records, tally)


def _count(tally: Tally, request: Request, contradicted: bool) -> None:
    tally.requests += 1
    tally.tokens += request.token_count
    tally.split += request.parts is not None
    if request.chunk_count is not None:
        tally.streams += 1
        tally.contradicted += contradicted
