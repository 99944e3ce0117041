"""The stream record (the core's hold plus stop state) and the pure functions that advance it.

Text flows in two stages. The core turns ids into certain text; this layer then holds back the
longest suffix of that text that could still start a stop string, and releases it as soon as it
cannot. A stream ends on a stop token or EOS, a stop string, its token limit, :func:`close`
(no more tokens) or :func:`abort`; after that it emits nothing and refuses tokens.
"""

from __future__ import annotations

__all__ = ["NO_RULES", "Stream", "open_stream", "advance", "advance_many", "close", "abort"]

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, TypeAlias

import attrs

from puredetok.core.codec import Codec, DecodeState
from puredetok.core.stream import _state, admit_token, feed, finish_hold, start, step_hold
from puredetok.errors import InvalidTokenError, StreamFinishedError
from puredetok.stops.matcher import Match, find_stop, held_from, scan
from puredetok.stops.rules import FinishReason, StopRules

NO_RULES = StopRules()
"""The default rules: no stop strings, no stop or EOS tokens, no limits."""
_LENGTH = FinishReason("length")
_ABORT = FinishReason("abort")
_Quiet: TypeAlias = tuple[Sequence[str | None], tuple[int, ...], tuple[bool, ...], int]


class _Storage:
    """The slots of a :class:`Stream`, without its frozen ``__setattr__`` (see :func:`_record`)."""

    __slots__ = (
        "codec",
        "rules",
        "hold",
        "held",
        "min_left",
        "max_left",
        "finish_reason",
        "tables",
        "quiet",
        "__weakref__",
    )
    codec: Codec
    rules: StopRules
    hold: Hashable
    held: str
    min_left: int
    max_left: int | None
    finish_reason: FinishReason | None
    tables: _Quiet | None
    quiet: _Quiet | None


@attrs.frozen
class Stream(_Storage):
    """One request's stream: its codec, its :class:`StopRules`, the core's hold and the stop state.

    Immutable and hashable; its size is bounded (the held text is shorter than the longest stop
    string, and the core's hold is bounded by the core). It travels without its codec:
    :meth:`to_bytes` is a few dozen bytes, and a pickled stream unpickles as a
    :class:`~puredetok.stops.saving.SavedStream` to resume with the codec. Like the core's state, it
    holds only what decides its future: two streams that compare equal continue identically.
    """

    codec: Codec
    """How the request's tokens decode."""
    rules: StopRules
    """The request's stop rules."""
    hold: Hashable = attrs.field(
        default=attrs.Factory(lambda self: self.codec.decoding.initial, takes_self=True)
    )
    """The core's hold after the last token consumed (see :attr:`decode`): after a prompt, it
    carries what of the prompt's text the output may still repeat, so that it never is."""
    held: str = ""
    """Text the core has released but this layer holds: the longest suffix that could still start a
    stop string (always shorter than the longest stop string; empty once finished)."""
    min_left: int = attrs.field(default=attrs.Factory(lambda self: self.rules.min_tokens, takes_self=True))
    """Generated tokens still to come before stops apply (counts down from ``min_tokens`` to 0)."""
    max_left: int | None = attrs.field(
        default=attrs.Factory(lambda self: self.rules.max_new_tokens, takes_self=True)
    )
    """Tokens left before the stream ends with ``"length"`` (counts down from ``max_new_tokens``;
    None without a limit)."""
    finish_reason: FinishReason | None = None
    """Why the stream ended, or None while it runs."""
    tables: _Quiet | None = attrs.field(init=False, eq=False, repr=False)
    """Derived: the core's fast texts, the codec's per-id summaries and the rules' verdict per
    summary; None when an ending id is not an added token (the summaries cannot tell it apart)."""
    quiet: _Quiet | None = attrs.field(init=False, eq=False, repr=False)
    """Derived: :attr:`tables` while the stream is in its steady state (running, the core idle,
    nothing held, no token count to keep), when :func:`advance` can return a quiet token's text
    without building anything; None otherwise."""

    def __attrs_post_init__(self) -> None:
        codec, rules = self.codec, self.rules
        if self.held and self.held not in rules.matcher.prefixes:
            raise ValueError(f"held text {self.held!r} is not a proper prefix of a stop string")
        if self.hold == codec.decoding.idle:  # the core's fast path tests identity, not equality
            object.__setattr__(self, "hold", codec.decoding.idle)
        tables = _tables(codec, rules)
        object.__setattr__(self, "tables", tables)
        steady = self.finish_reason is None and _steady(
            codec, self.hold, self.held, self.min_left, self.max_left
        )
        object.__setattr__(self, "quiet", tables if steady else None)

    @property
    def decode(self) -> DecodeState:
        """The core's state: this stream's codec and hold."""
        return _state(self.codec, self.hold)

    @property
    def finished(self) -> bool:
        """Whether the stream has ended (it then refuses tokens and emits nothing more)."""
        return self.finish_reason is not None

    def __copy__(self) -> Stream:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Stream:
        return self

    def to_bytes(self) -> bytes:
        """This stream without its codec, stop rules and counters included: a few dozen bytes
        (see :mod:`puredetok.stops.saving`). :meth:`from_bytes` gives an equal stream.
        """
        from puredetok.stops.saving import stream_to_bytes

        return stream_to_bytes(self)

    @classmethod
    def from_bytes(cls, codec: Codec, data: bytes | bytearray | memoryview) -> Stream:
        """The stream saved by :meth:`to_bytes`, resumed with ``codec``; raises
        :class:`~puredetok.errors.CodecMismatchError` for a codec with another fingerprint and
        :class:`~puredetok.errors.InvalidStateError` for truncated, corrupt or hostile bytes.
        """
        from puredetok.stops.saving import stream_from_bytes

        return stream_from_bytes(codec, data)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its bytes: unpickled, a SavedStream to resume(codec). No codec tables copied.
        from puredetok.stops.saving import SavedStream

        return (SavedStream, (self.to_bytes(),))


def _steady(codec: Codec, hold: Hashable, held: str, min_left: int, max_left: int | None) -> bool:
    return hold is codec.decoding.idle and not held and not min_left and max_left is None


def _running(stream: Stream, hold: Hashable, held: str, min_left: int, max_left: int | None) -> Stream:
    """``stream``, running on with these values."""
    return _record(stream.codec, stream.rules, stream.tables, hold, held, min_left, max_left, None)


def _record(
    codec: Codec,
    rules: StopRules,
    tables: _Quiet | None,
    hold: Hashable,
    held: str,
    min_left: int,
    max_left: int | None,
    finish_reason: FinishReason | None,
) -> Stream:
    """The record ``Stream(codec, rules, hold, held, min_left, max_left, finish_reason)`` builds,
    built for the per-token path: a frozen class refuses plain attribute stores, and its generated
    ``__init__`` (or setting slots through their descriptors) costs three times as much as filling
    a :class:`_Storage`, whose layout is the same, and then making it a :class:`Stream`.
    """
    storage = _Storage()
    storage.codec = codec
    storage.rules = rules
    storage.hold = hold
    storage.held = held
    storage.min_left = min_left
    storage.max_left = max_left
    storage.finish_reason = finish_reason
    storage.tables = tables
    steady = hold is codec.decoding.idle and not held and not min_left and max_left is None
    storage.quiet = tables if steady and finish_reason is None else None
    storage.__class__ = Stream
    built: Stream = storage  # type: ignore[assignment]  # it is one now (typing.cast is a call)
    return built


def _tables(codec: Codec, rules: StopRules) -> _Quiet | None:
    if not rules.ending_ids <= codec.added_ids:
        return None
    fast = codec.decoding.fast
    return (fast, codec.classes, rules.loud, min(len(fast), codec.vocab_size))


def open_stream(codec: Codec, rules: StopRules = NO_RULES, prompt_ids: Iterable[int] = ()) -> Stream:
    """A new stream for one request. The prompt's text is never emitted nor searched for stops."""
    if not isinstance(rules, StopRules):
        raise TypeError(f"rules must be a StopRules, got {type(rules).__name__}")
    if not isinstance(codec, Codec):
        raise TypeError(f"codec must be a Codec, got {type(codec).__name__}")
    if type(prompt_ids) in (tuple, list) and not prompt_ids:
        hold = codec.decoding.initial
    else:
        hold = start(codec, prompt_ids).hold
    if hold == codec.decoding.idle:
        hold = codec.decoding.idle
    return _record(
        codec, rules, _tables(codec, rules), hold, "", rules.min_tokens, rules.max_new_tokens, None
    )


def _refuse(stream: Stream) -> StreamFinishedError:
    reason = stream.finish_reason
    assert reason is not None
    why = reason.kind if reason.matched is None else f"{reason.kind} ({reason.matched!r})"
    return StreamFinishedError(f"the stream has finished ({why}); it takes no more tokens")


def _spent(max_left: int | None) -> int | None:
    return None if max_left is None else max_left - 1


def _ended(
    stream: Stream, hold: Hashable, min_left: int, max_left: int | None, reason: FinishReason
) -> Stream:
    return _record(stream.codec, stream.rules, stream.tables, hold, "", min_left, max_left, reason)


def _stopped(
    stream: Stream, hold: Hashable, min_left: int, max_left: int | None, text: str, match: Match
) -> tuple[Stream, str]:
    """A stop string completed: emit ``text`` up to it (or through it), nothing after it."""
    cut = match.end if stream.rules.include_stop_str_in_output else match.start
    return _ended(stream, hold, min_left, max_left, FinishReason("stop", match.stop)), text[:cut]


def _end(
    stream: Stream, hold: Hashable, min_left: int, max_left: int | None, text: str, searched: int
) -> tuple[Stream, str]:
    """End the stream with its last ``text``, whose first ``searched`` characters (the held text)
    were searched already: cut at a stop string found after them, else end with ``"length"``.
    """
    if not min_left:
        match = find_stop(stream.rules.matcher, text, searched)
        if match is not None:
            return _stopped(stream, hold, min_left, max_left, text, match)
    return _ended(stream, hold, min_left, max_left, _LENGTH), text


def _end_on_token(stream: Stream, hold: Hashable, delta: str, token_id: int) -> tuple[Stream, str]:
    """A stop or EOS token: the text before it is final; the token's own text only if included.
    A stop string completing in that final text comes first, and wins.
    """
    held, codec = stream.held, stream.codec
    if stream.rules.include_stop_str_in_output:
        text = held + delta + finish_hold(codec, hold)
    else:
        text = held + finish_hold(codec, stream.hold)
    max_left = _spent(stream.max_left)
    ended, emitted = _end(stream, hold, 0, max_left, text, len(held))
    if ended.finish_reason == _LENGTH:
        ended = _ended(stream, hold, 0, max_left, FinishReason("stop", int(token_id)))
    return ended, emitted


def _early(stream: Stream, hold: Hashable, delta: str) -> tuple[Stream, str]:
    """A token within the first ``min_tokens``: it cannot end the stream by itself, and its text is
    not searched, but a suffix that may start a stop string completing later is still held.
    """
    rules, held = stream.rules, stream.held
    matcher = rules.matcher
    if held or (matcher.stops and matcher.opener.search(delta)):
        text = held + delta
        cut = held_from(matcher, text)
        delta, held = text[:cut], text[cut:]
    min_left, max_left = stream.min_left - 1, _spent(stream.max_left)
    if max_left == 0:
        tail = finish_hold(stream.codec, hold)
        ended, tail = _end(stream, hold, min_left, max_left, held + tail, len(held))
        return ended, delta + tail
    return _running(stream, hold, held, min_left, max_left), delta


def advance(stream: Stream, token_id: int) -> tuple[Stream, str]:
    """One generated token: ``(new_stream, delta)``, where ``delta`` is text that is final.

    Raises :class:`InvalidTokenError` for an id outside the vocabulary and
    :class:`StreamFinishedError` once the stream has finished; ``stream`` stays valid either way.
    """
    # Most tokens meet a quiet stream and leave it as it is: their text comes from the core's fast
    # table when it cannot end the stream nor start a stop string. A function call would be a third
    # of this path's cost, so the rest lives in _advance.
    quiet = stream.quiet
    if quiet is not None and type(token_id) is int:
        fast, classes, loud, size = quiet
        if 0 <= token_id < size and not loud[classes[token_id]]:
            delta = fast[token_id]
            if delta is not None:
                return stream, delta
    return _advance(stream, token_id)


def _advance(stream: Stream, token_id: int) -> tuple[Stream, str]:
    if stream.finish_reason is not None:
        raise _refuse(stream)
    codec = stream.codec
    decoding = codec.decoding
    old = stream.hold
    if type(token_id) is int and 0 <= token_id < codec.vocab_size:
        delta = decoding.fast[token_id] if old is decoding.idle else None
    else:  # an ignored id past the vocabulary still counts as a generated token
        token_id = admit_token(codec, token_id)
        delta = None
    if delta is None:
        hold, delta = step_hold(codec, old, token_id)
    else:
        hold = old
    if stream.min_left:
        return _early(stream, hold, delta)
    rules = stream.rules
    if token_id in rules.ending_ids:
        return _end_on_token(stream, hold, delta, token_id)
    held = stream.held
    matcher = rules.matcher
    if held or (delta and not matcher.openers.isdisjoint(delta)):
        text = held + delta
        match, held = scan(matcher, held, delta)
        if match is not None:
            return _stopped(stream, hold, 0, _spent(stream.max_left), text, match)
        delta = text[: len(text) - len(held)]
    max_left = stream.max_left
    if max_left is None:
        if hold is old and held is stream.held:
            return stream, delta
        return _record(codec, rules, stream.tables, hold, held, 0, None, None), delta
    if max_left == 1:
        ended, tail = _end(stream, hold, 0, 0, held + finish_hold(codec, hold), len(held))
        return ended, delta + tail
    return _running(stream, hold, held, 0, max_left - 1), delta


def close(stream: Stream) -> tuple[Stream, str]:
    """No more tokens will come: flush everything held (the core's tail and the held text).

    The flushed text is searched for stop strings like any other text (unless fewer than
    ``min_tokens`` tokens came); without a match the stream ends with ``"length"``. Closing a
    finished stream returns it unchanged, with no text.
    """
    if stream.finish_reason is not None:
        return stream, ""
    held, hold = stream.held, stream.hold
    text = held + finish_hold(stream.codec, hold)
    return _end(stream, hold, stream.min_left, stream.max_left, text, len(held))


def abort(stream: Stream) -> Stream:
    """End the stream with ``"abort"``: nothing held is ever emitted.

    A finished stream is returned unchanged (it keeps its finish reason).
    """
    if stream.finish_reason is not None:
        return stream
    return _ended(stream, stream.hold, stream.min_left, stream.max_left, _ABORT)


def _one_by_one(stream: Stream, ids: list[Any], begin: int, end: int) -> tuple[Stream, str]:
    texts = []
    for position in range(begin, end):
        if stream.finish_reason is not None:
            break
        try:
            stream, text = advance(stream, ids[position])
        except InvalidTokenError as error:
            raise InvalidTokenError(error.token_id, error.vocab_size, position) from None
        texts.append(text)
    return stream, "".join(texts)


def _quiet_end(stream: Stream, ids: list[Any], begin: int) -> int | None:
    """The end of the longest run from ``begin`` in which no single token can end the stream (no
    stop or EOS token that counts, not the token reaching the limit) and that does not straddle
    the ``min_tokens`` threshold; None if the ids hold a value that is not even hashable.
    """
    end = len(ids)
    if stream.max_left is not None:
        end = min(end, begin + stream.max_left - 1)
    if stream.min_left:
        return min(end, begin + stream.min_left)
    ending = stream.rules.ending_ids
    if ending and begin < end:
        window = ids[begin:end]
        try:
            if ending.isdisjoint(window):
                return end
        except TypeError:
            return None
        return begin + next(offset for offset, token_id in enumerate(window) if token_id in ending)
    return end


def _run(stream: Stream, ids: list[Any], begin: int, end: int) -> tuple[Stream, str]:
    """Tokens that cannot end the stream by themselves, fed to the core at once. Only when a stop
    string completes (or an id is invalid) are they replayed one by one, to end where that does.
    """
    try:
        decode, delta = feed(stream.decode, ids if begin == 0 and end == len(ids) else ids[begin:end])
    except InvalidTokenError:
        return _one_by_one(stream, ids, begin, end)
    rules, held = stream.rules, stream.held
    matcher = rules.matcher
    if held or (matcher.stops and matcher.opener.search(delta)):
        text = held + delta
        # Searching for every stop string at once is one C-level pass; the exact (earliest
        # completing) match only matters when there is one, and then the tokens are replayed.
        searched_from = max(0, len(held) - matcher.longest + 1)
        if not stream.min_left and matcher.any_stop.search(text, searched_from) is not None:
            return _one_by_one(stream, ids, begin, end)
        cut = held_from(matcher, text)
        delta, held = text[:cut], text[cut:]
    count = end - begin
    max_left = None if stream.max_left is None else stream.max_left - count
    min_left = stream.min_left and stream.min_left - count
    return _running(stream, decode.hold, held, min_left, max_left), delta


def advance_many(stream: Stream, token_ids: Iterable[int]) -> tuple[Stream, str]:
    """Several generated tokens: the same stream and text as advancing them one by one.

    Ids after the one that ends the stream are ignored. An invalid id before that raises
    :class:`InvalidTokenError` naming its position, and nothing has happened. A finished stream
    raises :class:`StreamFinishedError` if offered any id.
    """
    ids: list[Any] = token_ids if type(token_ids) is list else list(token_ids)
    if stream.finish_reason is not None:
        if ids:
            raise _refuse(stream)
        return stream, ""
    texts = []
    position = 0
    while position < len(ids) and stream.finish_reason is None:
        end = _quiet_end(stream, ids, position)
        if end is None:  # one by one, so that the error names the bad value where it stands
            end = len(ids)
            stream, text = _one_by_one(stream, ids, position, end)
        elif end > position:
            stream, text = _run(stream, ids, position, end)
        else:
            end = position + 1
            stream, text = _one_by_one(stream, ids, position, end)
        texts.append(text)
        position = end
    return stream, "".join(texts)
