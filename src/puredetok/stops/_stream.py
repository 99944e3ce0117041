"""The stream record (the core's hold plus stop state) and the pure functions that advance it.

The rules, stated once (the code below is their consequence):

1. **Two stages.** The core turns ids into certain text; this layer then holds back the longest
   suffix of that text that could still start a stop string (the *held* text), and releases it as
   soon as it cannot.
2. **Ends.** A stream ends on an *ending id* (a stop token, or EOS unless ``ignore_eos``), a stop
   string completing in its text, its token limit (``max_new_tokens``), :func:`close` (no more
   tokens) or :func:`abort`; within its first ``min_tokens`` tokens no ending id nor stop string
   ends it. Once ended it emits nothing and refuses tokens.
3. **Steady.** A stream is *steady* while it runs, its core hold is the core's steady hold
   (:func:`puredetok._core.steady`) and it holds no text. A token is *quiet* when its text holds
   no first character of a stop string and it is not an ending id: it can neither start a stop
   string nor end the stream. A steady stream given a quiet token whose step leaves the core's
   hold as it is stays steady and emits the token's steady text as it is; only its count changes,
   while it counts its tokens (``min_tokens`` not yet reached, or ``max_new_tokens`` set). That is
   the **steady path**, most tokens' path: :func:`advance` takes it. Every other token takes the
   **general path** (:func:`_advance`: the core's step, then the stop check), and so does the
   token at which the count hands over: the one reaching ``min_tokens`` (when nothing counts after
   it) or the token limit.

The steady path reads one record, :class:`_SteadyPath`, which a steady stream carries and a stream
that is not carries as None; the per-id class summaries (:mod:`puredetok._core.classes`) tell
most quiet tokens from the rest without looking at their text. They cannot tell an ending id that
is not an added token from other tokens: with one, no stream carries the record, and every token
takes the general path (with the same result).
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any, Final

import attrs

from puredetok._core import Codec, DecodeState, feed_hold, finish_hold, start, steady, step_hold
from puredetok.errors import InvalidTokenError, StateTypeError, StreamFinishedError
from puredetok.stops._matcher import Match, Matcher, scan
from puredetok.stops._rules import FinishReason, StopRules
from puredetok.stops._saving import stream_from_bytes, stream_to_bytes

NO_RULES = StopRules()
"""The default rules: no stop strings, no stop or EOS tokens, no limits."""
_LENGTH = FinishReason("length")
_ABORT = FinishReason("abort")
_UNSET: Any = object()
_new = object.__new__


# The two records below are plain classes with slots, filled once when built (their fields are
# Final to mypy), as the stream's own record is. On Python 3.11 a NamedTuple costs 3.4 x a tuple
# to unpack and 3.6 x a slotted class to read by name, and a frozen attrs record, read as fast as
# a slotted class, costs 4 x as much to build (docs/benchmarks.md, "The stop layer's records").
class _SteadyPath:
    """What the steady path reads (rule 3), shared by the records of a stream and of the streams
    opened alike.
    """

    __slots__ = ("texts", "classes", "loud", "size", "hand_over", "openers", "ending")
    texts: Final[Sequence[str | None]]
    """The core's steady texts (:func:`puredetok._core.steady`): per id, its text from the steady
    hold, or None for an id whose step leaves it."""
    classes: Final[Sequence[int]]
    """The codec's per-id class summaries (:attr:`puredetok._core.Codec.classes`)."""
    loud: Final[Sequence[bool]]
    """The rules' verdict per summary (:attr:`StopRules.loud`): False for a summary every token of
    which is quiet; a token whose summary is loud is quiet if its text holds none of
    :attr:`openers` and it is not one of :attr:`ending`."""
    size: Final[int]
    """How many ids the tables cover (a larger id takes the general path)."""
    hand_over: Final[int | None]
    """The count whose token takes the general path: ``max_new_tokens``' end, or ``min_tokens``'
    when nothing counts after it; None when the stream counts no tokens."""
    openers: Final[frozenset[str]]
    """The first characters of the stop strings."""
    ending: Final[frozenset[int]]
    """The ending ids."""

    def __init__(
        self, texts: Sequence[str | None], codec: Codec, rules: StopRules, hand_over: int | None
    ) -> None:
        self.texts = texts
        self.classes = codec.classes
        self.loud = rules.loud
        self.size = min(len(codec.classes), codec.vocab_size)
        self.hand_over = hand_over
        self.openers = rules.matcher.openers
        self.ending = rules.ending_ids

    def __iter__(self) -> Iterator[Any]:
        """The fields in the order above: :func:`advance_each` unpacks them, in one statement, when
        a batch's tables change.
        """
        return iter(
            (self.texts, self.classes, self.loud, self.size, self.hand_over, self.openers, self.ending)
        )


class _Context:
    """What a stream keeps from its opening to its end, shared by all its records (and by the
    streams opened alike: :func:`open_like`).
    """

    __slots__ = (
        "codec",
        "rules",
        "matcher",
        "ending_ids",
        "min_end",
        "max_end",
        "steady_hold",
        "steady_texts",
        "early",
        "late",
    )
    codec: Final[Codec]
    """How the stream's tokens decode."""
    rules: Final[StopRules]
    """The stream's stop rules."""
    matcher: Final[Matcher]
    """The rules' :attr:`~StopRules.matcher`, for the general path."""
    ending_ids: Final[frozenset[int]]
    """The rules' :attr:`~StopRules.ending_ids`, for the general path."""
    min_end: Final[int]
    """The count at which ``min_tokens`` is reached."""
    max_end: Final[int | None]
    """The count at which ``max_new_tokens`` is reached (None: no limit)."""
    steady_hold: Final[Hashable]
    """The core's steady hold (:func:`puredetok._core.steady`); the core's steady path tests it by
    identity."""
    steady_texts: Final[Sequence[str | None]]
    """The core's steady texts, for the general path's step."""
    early: Final[_SteadyPath | None]
    """The steady path's tables while fewer than :attr:`min_end` tokens were counted (None when an
    ending id is not an added token, which the class summaries cannot tell apart)."""
    late: Final[_SteadyPath | None]
    """The same from :attr:`min_end` on."""

    def __init__(self, codec: Codec, rules: StopRules, min_end: int, max_end: int | None) -> None:
        self.codec = codec
        self.rules = rules
        self.matcher = rules.matcher
        self.ending_ids = rules.ending_ids
        self.min_end = min_end
        self.max_end = max_end
        self.steady_hold, self.steady_texts = steady(codec)
        late = early = None
        if rules.ending_ids <= codec.added_ids:
            late = early = _SteadyPath(self.steady_texts, codec, rules, max_end)
            if max_end is None and min_end:  # counted only until min_tokens is reached
                early = _SteadyPath(self.steady_texts, codec, rules, min_end)
        self.early = early
        self.late = late


class Stream:
    """One request's stream: its codec, its :class:`StopRules`, the core's hold and the stop state.

    ``Stream(codec, rules, hold, held, min_left, max_left, finish_reason)`` builds one (every field
    after ``rules`` has a default: a fresh stream's); :func:`open_stream` is the usual way.

    Immutable (its fields are read-only), hashable; its size is bounded (the held text is shorter
    than the longest stop string, and the core's hold is bounded by the core). It travels without
    its codec: :meth:`to_bytes` is a few dozen bytes, and a pickled stream unpickles as a
    :class:`SavedStream` to resume with the codec. Like the core's state, it
    holds only what decides its future: two streams that compare equal continue identically.

    A stream that counts its tokens is a new record on every token, so the record is six private
    slots, filled by this module only (an object and six stores, no constructor call). See
    docs/benchmarks.md.
    """

    __slots__ = ("_context", "_hold", "_held", "_reason", "_count", "_steady", "__weakref__")
    _context: _Context
    """What the stream keeps from its opening to its end."""
    _hold: Hashable
    """The core's hold."""
    _held: str
    """The held text (rule 1)."""
    _reason: FinishReason | None
    """Why the stream ended (None while it runs)."""
    _count: int
    """Tokens counted (only while ``min_tokens`` or ``max_new_tokens`` needs a count)."""
    _steady: _SteadyPath | None
    """The steady path's tables while the stream is steady (rule 3), else None."""

    def __new__(
        cls,
        codec: Codec,
        rules: StopRules,
        hold: Hashable = _UNSET,
        held: str = "",
        min_left: int = _UNSET,
        max_left: int | None = _UNSET,
        finish_reason: FinishReason | None = None,
    ) -> Stream:
        """A stream with these fields (``min_left`` and ``max_left`` default to the rules'
        ``min_tokens`` and ``max_new_tokens``, ``hold`` to a fresh stream's); raises ``TypeError``
        for a codec or rules of another type and ``ValueError`` for held text that starts no stop
        string.
        """
        if not isinstance(codec, Codec):
            raise TypeError(f"codec must be a Codec, got {type(codec).__name__}")
        if not isinstance(rules, StopRules):
            raise TypeError(f"rules must be a StopRules, got {type(rules).__name__}")
        if held and held not in rules.matcher.prefixes:
            raise ValueError(f"held text {held!r} is not a proper prefix of a stop string")
        min_end = rules.min_tokens if min_left is _UNSET else min_left
        max_end = rules.max_new_tokens if max_left is _UNSET else max_left
        context = _Context(codec, rules, min_end, max_end)
        if hold is _UNSET:
            hold = codec.decoding.initial
        elif hold == context.steady_hold:  # the core's steady path tests identity, not equality
            hold = context.steady_hold
        stream: Stream = _new(Stream)
        stream._context = context
        return _record(stream, hold, held, 0, finish_reason)

    @property
    def codec(self) -> Codec:
        """How the request's tokens decode."""
        return self._context.codec

    @property
    def rules(self) -> StopRules:
        """The request's stop rules."""
        return self._context.rules

    @property
    def hold(self) -> Hashable:
        """The core's hold after the last token consumed (see :attr:`decode`): after a prompt, it
        carries what of the prompt's text the output may still repeat, so that it never is.
        """
        return self._hold

    @property
    def held(self) -> str:
        """Text the core has released but this layer holds: the longest suffix that could still
        start a stop string (always shorter than the longest stop string; empty once finished).
        """
        return self._held

    @property
    def finish_reason(self) -> FinishReason | None:
        """Why the stream ended, or None while it runs."""
        return self._reason

    @property
    def min_left(self) -> int:
        """Generated tokens still to come before stops apply (counts down from ``min_tokens`` to 0)."""
        return max(0, self._context.min_end - self._count)

    @property
    def max_left(self) -> int | None:
        """Tokens left before the stream ends with ``"length"`` (counts down from ``max_new_tokens``;
        None without a limit).
        """
        end = self._context.max_end
        return None if end is None else end - self._count

    @property
    def finished(self) -> bool:
        """Whether the stream has ended (it then refuses tokens and emits nothing more)."""
        return self._reason is not None

    @property
    def decode(self) -> DecodeState:
        """The core's state: this stream's codec and hold."""
        return DecodeState(self._context.codec, self._hold)

    def fields(self) -> tuple[Codec, StopRules, Hashable, str, int, int | None, FinishReason | None]:
        """``(codec, rules, hold, held, min_left, max_left, finish_reason)``: what the stream is
        (``Stream(*stream.fields()) == stream``).
        """
        context = self._context
        return (
            context.codec,
            context.rules,
            self._hold,
            self._held,
            self.min_left,
            self.max_left,
            self._reason,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Stream):
            return NotImplemented
        return self is other or self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash(self.fields())

    def __repr__(self) -> str:
        names = ("codec", "rules", "hold", "held", "min_left", "max_left", "finish_reason")
        return "Stream(" + ", ".join(f"{n}={v!r}" for n, v in zip(names, self.fields())) + ")"

    def __copy__(self) -> Stream:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Stream:
        return self

    def to_bytes(self) -> bytes:
        """This stream without its codec, stop rules and counters included: a few dozen bytes
        (see :mod:`puredetok.stops._saving`). :meth:`from_bytes` gives an equal stream.
        """
        fields = (self.rules, self.hold, self.held, self.min_left, self.max_left, self.finish_reason)
        return stream_to_bytes(self.codec, fields)

    @classmethod
    def from_bytes(
        cls,
        codec: Codec,
        data: bytes | bytearray | memoryview,
        *,
        max_stops: int | None = None,
        max_stop_chars: int | None = None,
    ) -> Stream:
        """The stream saved by :meth:`to_bytes`, resumed with ``codec``; raises
        :class:`~puredetok.errors.CodecMismatchError` for a codec with another fingerprint and
        :class:`~puredetok.errors.InvalidStateError` for truncated, corrupt or hostile bytes.

        Bytes from a peer that is not trusted: give the limits a fresh request is held to, and
        saved stop strings past ``max_stops`` strings or ``max_stop_chars`` characters raise
        ValueError (naming the limit) before their rules are built.
        """
        limits = None
        if max_stops is not None or max_stop_chars is not None:
            limits = (
                sys.maxsize if max_stops is None else max_stops,
                sys.maxsize if max_stop_chars is None else max_stop_chars,
            )
        return cls(codec, *stream_from_bytes(codec, data, limits))

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its bytes: unpickled, a SavedStream to resume(codec). No codec tables copied.
        return (SavedStream, (self.to_bytes(),))


def _record(
    stream: Stream, hold: Hashable, held: str, count: int, reason: FinishReason | None = None
) -> Stream:
    """``stream`` with these values: a new record, its six slots filled directly, steady or not as
    rule 3 says.
    """
    context = stream._context
    new: Stream = _new(Stream)
    new._context = context
    new._hold = hold
    new._held = held
    new._reason = reason
    new._count = count
    if hold is not context.steady_hold or held or reason is not None:
        new._steady = None
    else:
        new._steady = context.early if count < context.min_end else context.late
    return new


def open_stream(codec: Codec, rules: StopRules = NO_RULES, prompt_ids: Iterable[int] = ()) -> Stream:
    """A new stream for one request. The prompt's text is never emitted nor searched for stops."""
    if not isinstance(rules, StopRules):
        raise TypeError(f"rules must be a StopRules, got {type(rules).__name__}")
    if not isinstance(codec, Codec):
        raise TypeError(f"codec must be a Codec, got {type(codec).__name__}")
    if type(prompt_ids) in (tuple, list) and not prompt_ids:
        return Stream(codec, rules)
    return Stream(codec, rules, start(codec, prompt_ids).hold)


def open_like(stream: Stream, prompt_ids: Iterable[int] = ()) -> Stream:
    """A new stream with ``stream``'s codec and stop rules, after ``prompt_ids``: equal to
    ``open_stream(stream.codec, stream.rules, prompt_ids)``, and sharing the tables ``stream`` keeps
    from its opening, so that many requests opened alike cost a record each (a manager's case).
    """
    try:
        context = stream._context
    except AttributeError:
        raise StateTypeError("open_like", "Stream", stream) from None
    codec, rules = context.codec, context.rules
    hold = start(codec, prompt_ids).hold
    if (context.min_end, context.max_end) != (rules.min_tokens, rules.max_new_tokens):  # resumed mid-way
        return Stream(codec, rules, hold)
    steady_hold = context.steady_hold
    return _record(stream, steady_hold if hold == steady_hold else hold, "", 0)


def _refuse(stream: Stream) -> StreamFinishedError:
    reason = stream._reason
    assert reason is not None
    why = reason.kind if reason.matched is None else f"{reason.kind} ({reason.matched!r})"
    return StreamFinishedError(f"the stream has finished ({why}); it takes no more tokens")


def _end(stream: Stream, hold: Hashable, count: int, held: str, tail: str) -> tuple[Stream, str]:
    """End the stream at ``count`` with its last text, ``held + tail`` (``held`` searched already):
    cut at a stop string completing in ``tail`` (unless within ``min_tokens``), else end with
    ``"length"``.
    """
    context = stream._context
    if tail and count >= context.min_end:  # held alone completes no stop string
        match, _ = scan(context.matcher, held, tail)
        if match is not None:
            return _stopped(stream, hold, count, held + tail, match)
    return _record(stream, hold, "", count, _LENGTH), held + tail


def _stopped(stream: Stream, hold: Hashable, count: int, text: str, match: Match) -> tuple[Stream, str]:
    """A stop string completed: emit ``text`` up to it (or through it), nothing after it."""
    cut = match.end if stream._context.rules.include_stop_str_in_output else match.start
    return _record(stream, hold, "", count, FinishReason("stop", match.stop)), text[:cut]


def _end_on_token(
    stream: Stream, hold: Hashable, count: int, delta: str, token_id: int
) -> tuple[Stream, str]:
    """An ending id: the text before it is final; the token's own text only if included.
    A stop string completing in that final text comes first, and wins.
    """
    context = stream._context
    if context.rules.include_stop_str_in_output:
        tail = delta + finish_hold(context.codec, hold)
    else:
        tail = finish_hold(context.codec, stream._hold)
    ended, emitted = _end(stream, hold, count, stream._held, tail)
    if ended._reason is _LENGTH:
        ended = _record(stream, hold, "", count, FinishReason("stop", int(token_id)))
    return ended, emitted


def advance(stream: Stream, token_id: int) -> tuple[Stream, str]:
    """One generated token: ``(new_stream, delta)``, where ``delta`` is text that is final.

    Raises :class:`InvalidTokenError` for an id outside the vocabulary and
    :class:`StreamFinishedError` once the stream has finished; ``stream`` stays valid either way.
    Raises :class:`~puredetok.errors.StateTypeError` for a ``stream`` that is not a :class:`Stream`
    (a :class:`SavedStream`: resume it first).
    """
    # The steady path (rule 3 of the module's docstring); every other token is _advance's. Only a
    # Stream has the slot: a wrong object is told from the error it raises (a check of its type
    # would cost this path, where the try costs nothing).
    try:
        path = stream._steady
    except AttributeError:
        raise StateTypeError("advance", "Stream", stream) from None
    if path is not None and type(token_id) is int and 0 <= token_id < path.size:
        delta = path.texts[token_id]
        if delta is not None and (
            not path.loud[path.classes[token_id]]
            or (path.openers.isdisjoint(delta) and token_id not in path.ending)
        ):
            hand_over = path.hand_over
            if hand_over is None:
                return stream, delta
            count = stream._count + 1
            if count != hand_over:
                # The next record, as _record would build it: only the count changes, and the
                # stream stays steady with the same tables. A call of _record here costs 8 - 14 %
                # more of advance's instructions with max_new_tokens (docs/benchmarks.md, "The stop
                # layer's records").
                new: Stream = _new(Stream)
                new._context = stream._context
                new._hold = stream._hold
                new._held = ""
                new._reason = None
                new._count = count
                new._steady = path
                return new, delta
    return _advance(stream, token_id)


def _advance(stream: Stream, token_id: int) -> tuple[Stream, str]:
    """The general path: the core's step, then the stop check (rules 1 and 2)."""
    if stream._reason is not None:
        raise _refuse(stream)
    context = stream._context
    codec, steady_hold = context.codec, context.steady_hold
    old = stream._hold
    if (
        old is steady_hold
        and type(token_id) is int
        and 0 <= token_id < codec.vocab_size
        and (delta := context.steady_texts[token_id]) is not None
    ):
        hold = old  # the core's steady path (see puredetok._core.steady)
    else:
        hold, delta = step_hold(codec, old, token_id)  # an ignored id past the vocabulary counts too
    matcher, min_end, max_end = context.matcher, context.min_end, context.max_end
    held = stream._held
    count = stream._count
    if count < min_end:  # one of the first min_tokens: it ends nothing, its text is not searched
        count += 1
        if held or (delta and not matcher.openers.isdisjoint(delta)):
            # A suffix that may start a stop string completing later is still held.
            text = held + delta
            _, held = scan(matcher, held, delta, search=False)
            delta = text[: len(text) - len(held)]
    else:
        if max_end is not None:
            count += 1
        if token_id in context.ending_ids:
            return _end_on_token(stream, hold, count, delta, token_id)
        if held or (delta and not matcher.openers.isdisjoint(delta)):
            text = held + delta
            match, held = scan(matcher, held, delta)
            if match is not None:
                return _stopped(stream, hold, count, text, match)
            delta = text[: len(text) - len(held)]
    if count == max_end:
        ended, tail = _end(stream, hold, count, held, finish_hold(codec, hold))
        return ended, delta + tail
    # _record, written out, as before the records had names: a fifth of a mixed-script trace's
    # tokens come here, and a call would add a frame to each.
    new: Stream = _new(Stream)
    new._context = context
    new._hold = hold
    new._held = held
    new._reason = None
    new._count = count
    if hold is not steady_hold or held:
        new._steady = None
    else:
        new._steady = context.early if count < min_end else context.late
    return new, delta


def close(stream: Stream) -> tuple[Stream, str]:
    """No more tokens will come: flush everything held (the core's tail and the held text).

    The flushed text is searched for stop strings like any other text (unless fewer than
    ``min_tokens`` tokens came); without a match the stream ends with ``"length"``. Closing a
    finished stream returns it unchanged, with no text. Raises ``StateTypeError`` as :func:`advance` does.
    """
    try:
        if stream._reason is not None:
            return stream, ""
    except AttributeError:
        raise StateTypeError("close", "Stream", stream) from None
    hold = stream._hold
    return _end(stream, hold, stream._count, stream._held, finish_hold(stream._context.codec, hold))


def abort(stream: Stream) -> Stream:
    """End the stream with ``"abort"``: nothing held is ever emitted.

    A finished stream is returned unchanged (it keeps its finish reason). Raises ``TypeError`` as
    :func:`advance` does.
    """
    try:
        if stream._reason is not None:
            return stream
    except AttributeError:
        raise StateTypeError("abort", "Stream", stream) from None
    return _record(stream, stream._hold, "", stream._count, _ABORT)


def _one_by_one(stream: Stream, ids: list[Any], begin: int, end: int) -> tuple[Stream, str]:
    texts = []
    for position in range(begin, end):
        if stream._reason is not None:
            break
        try:
            stream, text = advance(stream, ids[position])
        except InvalidTokenError as error:
            raise InvalidTokenError(error.token_id, error.vocab_size, position) from None
        texts.append(text)
    return stream, "".join(texts)


def _run_end(stream: Stream, ids: list[Any], begin: int) -> int | None:
    """The end of the longest run from ``begin`` in which no single token can end the stream (no
    ending id that counts, not the token reaching the limit) and that does not straddle the
    ``min_tokens`` threshold; None if the ids hold a value that is not even hashable.
    """
    end = len(ids)
    max_left, min_left = stream.max_left, stream.min_left
    if max_left is not None:
        end = min(end, begin + max_left - 1)
    if min_left:
        return min(end, begin + min_left)
    ending = stream._context.ending_ids
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
    context = stream._context
    min_end = context.min_end
    old, held = stream._hold, stream._held
    try:
        hold, delta = feed_hold(context.codec, old, ids if begin == 0 and end == len(ids) else ids[begin:end])
    except InvalidTokenError:
        return _one_by_one(stream, ids, begin, end)
    matcher = context.matcher
    count = stream._count
    if held or (delta and not matcher.openers.isdisjoint(delta)):
        text = held + delta
        match, held = scan(matcher, held, delta, search=count >= min_end)
        if match is not None:
            return _one_by_one(stream, ids, begin, end)
        delta = text[: len(text) - len(held)]
    if count < min_end or context.max_end is not None:
        count += end - begin
    return _record(stream, hold, held, count), delta


_FEED_FROM = 9
"""From this many ids on, :func:`advance_many` hands them to the core's ``feed`` in runs; fewer
it advances one by one, which costs less until then (see docs/benchmarks.md)."""


def advance_many(stream: Stream, token_ids: Iterable[int]) -> tuple[Stream, str]:
    """Several generated tokens: the same stream and text as advancing them one by one.

    Ids after the one that ends the stream are ignored. An invalid id before that raises
    :class:`InvalidTokenError` naming its position, and nothing has happened. A finished stream
    raises :class:`StreamFinishedError` if offered any id; ``StateTypeError`` as :func:`advance` does.
    """
    ids: list[Any] = token_ids if type(token_ids) is list else list(token_ids)
    try:
        finished = stream._reason is not None
    except AttributeError:
        raise StateTypeError("advance_many", "Stream", stream) from None
    if finished:
        if ids:
            raise _refuse(stream)
        return stream, ""
    if len(ids) < _FEED_FROM:
        text = ""
        for token_id in ids:
            try:
                stream, delta = advance(stream, token_id)
            except InvalidTokenError as error:
                # Every id before it was taken, and an id equal to it in value and type would have
                # been refused too: its first occurrence as the same object is where it stands.
                position = next(index for index, value in enumerate(ids) if value is token_id)
                raise InvalidTokenError(error.token_id, error.vocab_size, position) from None
            text += delta
            if stream._reason is not None:
                break
        return stream, text
    texts = []
    position = 0
    while position < len(ids) and stream._reason is None:
        end = _run_end(stream, ids, position)
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


def advance_each(
    streams: Sequence[Stream], messages: Sequence[int | tuple[int, ...] | list[int]]
) -> tuple[list[Stream], list[str], list[int]]:
    """Many streams, each by its own message (one id, or a tuple or list of ids): what :func:`advance`
    (:func:`advance_many` for a tuple or list) gives each in turn, in one call, as a manager runs a batch
    of requests. Returns the new streams, their texts, and the positions of the streams that ended.

    It stops before the first message that would raise (an invalid id, a finished stream): the
    lists then cover only the messages before it, and advancing that one raises the error for the
    caller to handle. Raises ``ValueError`` if there are not as many messages as streams, and
    ``StateTypeError`` naming the position of one that is not a :class:`Stream`.
    """
    if len(streams) != len(messages):
        raise ValueError(f"{len(streams)} streams and {len(messages)} messages: one message per stream")
    news: list[Stream] = []
    texts: list[str] = []
    ended: list[int] = []
    keep, say = news.append, texts.append
    try:
        last: _SteadyPath | None = None
        for stream, token_id in zip(streams, messages):
            # advance's steady path, written out: its one copy. A call of advance per message costs
            # 18 - 58 % more instructions (docs/benchmarks.md, "The stop layer's records"). The
            # streams of a batch mostly share their tables: their fields are read again only when
            # they change.
            path = stream._steady
            if path is not None and type(token_id) is int:
                if path is not last:
                    steady_texts, classes, loud, size, hand_over, openers, ending = last = path
                if 0 <= token_id < size:
                    delta = steady_texts[token_id]
                    if delta is not None and (
                        not loud[classes[token_id]] or (openers.isdisjoint(delta) and token_id not in ending)
                    ):
                        if hand_over is None:
                            keep(stream)
                            say(delta)
                            continue
                        count = stream._count + 1
                        if count != hand_over:
                            new: Stream = _new(Stream)
                            new._context = stream._context
                            new._hold = stream._hold
                            new._held = ""
                            new._reason = None
                            new._count = count
                            new._steady = path
                            keep(new)
                            say(delta)
                            continue
            if isinstance(token_id, (tuple, list)):
                stream, delta = advance_many(stream, token_id)
            else:
                stream, delta = _advance(stream, token_id)
            if stream._reason is not None:
                ended.append(len(news))
            keep(stream)
            say(delta)
    except (InvalidTokenError, StreamFinishedError):
        pass
    except AttributeError:  # told from the error, as in advance
        wrong = streams[len(news)]
        if type(wrong) is Stream:
            raise
        raise StateTypeError("advance_each", "Stream", wrong, len(news)) from None
    return news, texts, ended


@attrs.frozen
class SavedStream:
    """A :class:`~puredetok.stops.Stream` without its codec: what a pickled stream unpickles as.

    ``pickle.loads(pickle.dumps(stream)).resume(codec) == stream`` for the stream's codec (or an
    equal one: the fingerprint is checked).
    """

    data: bytes = attrs.field(validator=attrs.validators.instance_of(bytes))
    """:meth:`Stream.to_bytes` of the stream."""

    def resume(self, codec: Codec) -> Stream:
        """The stream, with ``codec``; raises :class:`~puredetok.errors.CodecMismatchError` for a
        codec with another fingerprint and :class:`~puredetok.errors.InvalidStateError` for bad bytes.
        """
        return Stream.from_bytes(codec, self.data)
