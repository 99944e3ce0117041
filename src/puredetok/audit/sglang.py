"""SGLang's native ``/generate`` outputs: ``text``, ``output_ids`` and ``meta_info``.

``meta_info.id`` names the request and ``meta_info.finish_reason`` says how it ended:
``{"type": "stop", "matched": <stop string or token id>}``, ``{"type": "length", ...}`` or
``{"type": "abort", ...}``. SGLang cuts the text before a matched stop string and does not decode
a matched stop token (unless the request asked ``no_stop_trim``). The native output carries no
prompt ids; a record with ``input_ids`` (as the request that produced it had) is read with them.
One object per line, or a JSON array of them (a batched request's answer).
"""

from __future__ import annotations

__all__ = ["read_outputs", "read_array", "output_request"]

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from puredetok.audit.records import InputError, Item, Request


class _Output(msgspec.Struct):
    text: str
    output_ids: list[int]
    meta_info: dict[str, Any] = {}
    input_ids: list[int] | None = None


_decoder = msgspec.json.Decoder(_Output)
_array = msgspec.json.Decoder(list[_Output])


def output_request(output: _Output, file: str, line: int) -> Request:
    """The request of one output."""
    meta = output.meta_info
    name = meta.get("id")
    reason = meta.get("finish_reason")
    kind = reason.get("type") if isinstance(reason, dict) else reason if isinstance(reason, str) else None
    matched = reason.get("matched") if isinstance(reason, dict) else None
    stop = matched if kind == "stop" and isinstance(matched, str) else None
    stop_token = kind == "stop" and type(matched) is int
    return Request(
        name if isinstance(name, str | int) and not isinstance(name, bool) else line,
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
