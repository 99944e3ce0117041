"""A stop-layer :class:`~puredetok.stops.Stream` as a value: bytes without its codec, and back.

The same frame as a core state (:mod:`puredetok._core.saving`), with format byte 0x02, and a body
that holds everything that decides the stream's future besides the codec: the core's hold, the
held text (a proper prefix of a stop string), the token counters (``min_left``, ``max_left``),
the finish reason, and the stop rules themselves (stop strings, stop and EOS ids, ``ignore_eos``,
``max_new_tokens``, ``min_tokens``, ``include_stop_str_in_output``). So a stream resumed elsewhere
stops where the saved one would have, mid-stop-prefix or mid-``min_tokens`` included.

A pickled stream unpickles as a :class:`~puredetok.stops.SavedStream`, which ``resume`` turns back
into a stream given the codec (the codec's tables are never in the pickle).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, TypeAlias

from puredetok._core import Codec, check_hold, pack, unpack
from puredetok.errors import InvalidStateError
from puredetok.stops._rules import FinishReason, StopRules, check_stop_limits

STREAM_FORMAT = 0x02
"""The first byte of a saved stream."""

StreamFields: TypeAlias = tuple[StopRules, Hashable, str, int, "int | None", "FinishReason | None"]
"""What decides a stream's future besides its codec: ``(rules, hold, held, min_left, max_left,
finish_reason)``, the arguments of :class:`~puredetok.stops.Stream` after its codec."""


def _rules(rules: StopRules) -> tuple[Any, ...]:
    return (
        rules.stop,
        tuple(sorted(rules.stop_token_ids)),
        tuple(sorted(rules.eos_token_ids)),
        rules.ignore_eos,
        rules.max_new_tokens,
        rules.min_tokens,
        rules.include_stop_str_in_output,
    )


def stream_to_bytes(codec: Codec, fields: StreamFields) -> bytes:
    """A stream's ``fields`` saved for ``codec`` (see :meth:`~puredetok.stops.Stream.to_bytes`)."""
    rules, hold, held, min_left, max_left, reason = fields
    body = (
        hold,
        held,
        min_left,
        max_left,
        None if reason is None else (reason.kind, reason.matched),
        _rules(rules),
    )
    return pack(STREAM_FORMAT, codec, body)


def _fail(why: str) -> InvalidStateError:
    return InvalidStateError(f"not a saved stream: {why}")


def _read_rules(fields: object, limits: tuple[int, int] | None) -> StopRules:
    if type(fields) is not tuple or len(fields) != 7:
        raise _fail("its stop rules are not 7 fields")
    stop, stop_ids, eos_ids, ignore_eos, max_new, min_tokens, include = fields
    if type(stop) is not tuple or type(stop_ids) is not tuple or type(eos_ids) is not tuple:
        raise _fail("stop strings and ids are not tuples")
    if limits is not None:
        check_stop_limits(stop, *limits, whose="its state has ")
    if (max_new is not None and type(max_new) is not int) or type(min_tokens) is not int:
        raise _fail("token limits are not ints")
    try:
        return StopRules(
            stop=stop,
            stop_token_ids=stop_ids,
            eos_token_ids=eos_ids,
            ignore_eos=ignore_eos,
            max_new_tokens=max_new,
            min_tokens=min_tokens,
            include_stop_str_in_output=include,
        )
    except (ValueError, TypeError) as error:
        raise _fail(f"its stop rules are invalid: {error}") from None


def _read_reason(value: object) -> FinishReason | None:
    if value is None:
        return None
    if type(value) is not tuple or len(value) != 2:
        raise _fail("a finish reason that is not (kind, matched)")
    kind, matched = value
    if kind == "stop" and type(matched) in (str, int):
        return FinishReason("stop", matched)
    if kind in ("length", "abort") and matched is None:
        return FinishReason("length" if kind == "length" else "abort")
    raise _fail(f"an invalid finish reason {value!r:.60}")


def _count(value: object, low: int, high: int | None) -> int:
    if type(value) is not int or value < low or (high is not None and value > high):
        raise _fail(f"a token counter {value!r:.40} outside [{low}, {high}]")
    return value


def stream_from_bytes(
    codec: Codec, data: bytes | bytearray | memoryview, limits: tuple[int, int] | None = None
) -> StreamFields:
    """The fields of the stream saved in ``data``, checked for ``codec`` and, if given, its stop
    strings against ``limits``, ``(max_stops, max_stop_chars)``, before their rules are built (see
    :meth:`~puredetok.stops.Stream.from_bytes`).
    """
    body = unpack(STREAM_FORMAT, codec, data, "stream")
    if type(body) is not tuple or len(body) != 6:
        raise _fail("its body is not the 6 fields of a stream")
    hold, held, min_left, max_left, reason_fields, rule_fields = body
    rules = _read_rules(rule_fields, limits)
    reason = _read_reason(reason_fields)
    hold = check_hold(codec, hold)
    if type(held) is not str or (held and held not in rules.matcher.prefixes):
        raise _fail("its held text is not a proper prefix of one of its stop strings")
    limit = rules.max_new_tokens
    min_left = _count(min_left, 0, rules.min_tokens)
    if (limit is None) != (max_left is None):
        raise _fail("its token limit and its tokens left disagree")
    if max_left is not None:
        max_left = _count(max_left, 0 if reason is not None else 1, limit)
        if reason is None and min_left > max_left:
            raise _fail("more tokens before stops apply than tokens left")
    if reason is not None and held:
        raise _fail("a finished stream holds no text")
    return rules, hold, held, min_left, max_left, reason
