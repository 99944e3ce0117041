"""The wire format: typed msgpack frames ``[kind, version, batch]``, checked against the message
schema (docs/worker.md, "Wire protocol"). Never pickle.

A frame that cannot be read at all raises :class:`FrameError`; a frame in which only some messages
are malformed gives the good ones and a :class:`Rejected` note for each bad one, with its uid when
that much could be read, so that the sender of that one request can be told.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Iterable, Sequence
from typing import Any, Union, cast

import attrs
import msgspec

from puredetok.serving._messages import (
    COLUMNS,
    INBOUND,
    KINDS,
    PROTOCOL_VERSION,
    AnyBatch,
    Batch,
    DetokenizeBatch,
    DetokenizeMsg,
    Message,
    ReplyBatch,
    TokenizeMsg,
    Uid,
    UserReply,
)
from puredetok.worker._scan import DEFAULT_MAX_DEPTH, DEFAULT_MAX_ELEMENTS, ScanError, Scanner, TaggedError

DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Frames larger than this are dropped unread (64 MiB; configurable per decoder)."""

OPEN_ENDED = frozenset({TokenizeMsg.KIND})
"""Inbound kinds whose messages are mostly values of any shape (chat messages, template options,
the sampling parameters' extras): their frames are scanned before they are decoded (see
:class:`FrameDecoder`). Elsewhere only the extras of an opening may be (bounded in depth after
decoding; in number, by the frame's size)."""

_UNREADABLE = (msgspec.DecodeError, UnicodeDecodeError)
"""What decoding bytes that are not a valid message raises: msgspec 0.23 says ``DecodeError`` for a
string that is not UTF-8, the releases before it let ``UnicodeDecodeError`` through."""

_encoder = msgspec.msgpack.Encoder()


class FrameError(TaggedError):
    """A frame that cannot be read at all; ``reason`` is a short tag for counting."""


@attrs.frozen
class Rejected:
    """One message of a frame that did not match its schema."""

    kind: str
    index: int
    """Its position in the frame."""
    uid: Uid | None
    """Its uid, when at least that field could be read."""
    reason: str
    opening: bool = False
    """Whether it carried an opening (a detokenize message that would have opened its request)."""


@attrs.frozen
class Decoded:
    """A decoded frame: the valid messages as a batch, and the rejected ones."""

    batch: AnyBatch
    rejected: tuple[Rejected, ...] = ()


class _UidProbe(msgspec.Struct):
    uid: Uid | None = None


_FRAME_TYPES: dict[str, type[msgspec.Struct]] = {}


def frame_type(kind: str) -> type[msgspec.Struct]:
    """The frame of a kind of message: a Struct tagged with the kind, encoded as the array
    ``[kind, version, batch]`` (``version: int``; ``batch``: the kind's columns or list of records).
    """
    frame = _FRAME_TYPES.get(kind)
    if frame is None:
        cls = KINDS[kind]
        batch: Any = COLUMNS.get(kind) or types.GenericAlias(list, (cls,))
        frame = msgspec.defstruct(
            f"{type(kind).__name__}_{kind}_frame",
            [("version", int), ("batch", batch)],
            tag=kind,
            array_like=True,
            frozen=True,
        )
        _FRAME_TYPES[kind] = frame
    return frame


def encode_batch(messages: Sequence[Message]) -> bytes:
    """One frame holding ``messages``, which must all be of one kind (and at least one)."""
    if not messages:
        raise ValueError("a frame holds at least one message")
    kind = type(messages[0]).KIND
    classes: set[type[Message]] = set(map(type, messages))  # one C-level pass over thousands
    if len(classes) > 1 and any(cls.KIND != kind for cls in classes):
        raise ValueError("a frame holds messages of one kind")
    if kind == DetokenizeBatch.KIND:
        return encode_frame(DetokenizeBatch.of(cast(Sequence[DetokenizeMsg], messages)))
    if kind == ReplyBatch.KIND:
        return encode_frame(ReplyBatch.of(cast(Sequence[UserReply], messages)))
    return _encoder.encode(frame_type(kind)(PROTOCOL_VERSION, messages))


def encode_frame(batch: AnyBatch) -> bytes:
    """One frame holding ``batch``."""
    if isinstance(batch, Batch):
        return encode_batch(batch.items)
    return _encoder.encode(frame_type(batch.kind)(PROTOCOL_VERSION, batch))


def _positions(values: list[Any] | None, size: int) -> list[int]:
    """Positions of messages in a batch of ``size``: exact ints in range, else TypeError."""
    positions = values or []
    if not all(type(position) is int and 0 <= position < size for position in positions):
        raise TypeError(f"positions must be ints in [0, {size})")
    return positions


class FrameDecoder:
    """Reads frames of the given message kinds (by default, what a worker accepts).

    Nothing in a frame can make it raise anything but :class:`FrameError`, whatever its bytes
    (``msgspec`` recurses into nested arrays and maps; see :mod:`puredetok.worker._scan` for how
    that is kept in bounds): no message may nest more than ``max_depth`` arrays and maps, counting
    its own map, and a frame whose messages carry values of any shape (``tokenize``: chat
    messages, template options, the sampling parameters' extras) is first read by a
    :class:`~puredetok.worker._scan.Scanner`, at most ``max_elements`` values in all, so that
    decoding it builds a bounded number of objects.
    """

    def __init__(
        self,
        kinds: Iterable[type[Message]] = INBOUND,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_elements: int = DEFAULT_MAX_ELEMENTS,
    ) -> None:
        if max_depth < _OPENING_DEPTH + 1 or max_elements < 1 or max_frame_bytes < 1:
            raise ValueError(f"max_depth must be > {_OPENING_DEPTH}, max_elements and max_frame_bytes >= 1")
        self.max_frame_bytes = max_frame_bytes
        self.max_depth = max_depth
        self.max_elements = max_elements
        self._probe = msgspec.msgpack.Decoder(_UidProbe)
        self._uid_decoder = msgspec.msgpack.Decoder(Uid)
        self._batch: dict[str, msgspec.msgpack.Decoder[Any]] = {}
        self._one: dict[str, msgspec.msgpack.Decoder[Any]] = {}
        self._columns = msgspec.msgpack.Decoder(dict[str, list[Any] | None])
        kinds = tuple(kinds)
        closed = [frame_type(cls.KIND) for cls in kinds if cls.KIND not in OPEN_ENDED]
        self._frames: msgspec.msgpack.Decoder[Any] | None = (
            msgspec.msgpack.Decoder(Union[tuple(closed)]) if closed else None  # noqa: UP007
        )
        for cls in kinds:
            columns = COLUMNS.get(cls.KIND)
            whole = columns if columns is not None else types.GenericAlias(list, (cls,))
            self._batch[cls.KIND] = msgspec.msgpack.Decoder(whole)
            self._one[cls.KIND] = msgspec.msgpack.Decoder(cls)

    def decode(self, frame: bytes | memoryview) -> Decoded:
        """The batch in ``frame``; raises :class:`FrameError` when nothing in it can be read."""
        if len(frame) > self.max_frame_bytes:
            raise FrameError("oversize", f"{len(frame):,} bytes > limit {self.max_frame_bytes:,}")
        try:
            return self._decode(memoryview(frame))
        except RecursionError:  # only when called with the interpreter's stack nearly used up
            raise FrameError("too_deep", "the frame nests deeper than the stack left allows") from None

    def _decode(self, view: memoryview) -> Decoded:
        if self._frames is not None:  # a well-formed frame: one decode, straight into its records
            try:
                frame = self._frames.decode(view)
            except (msgspec.ValidationError, *_UNREADABLE, RecursionError):
                pass  # read again part by part below: what is wrong, and which messages are good
            else:
                if frame.version == PROTOCOL_VERSION:
                    batch = frame.batch
                    if isinstance(batch, list):
                        batch = Batch(type(frame).__struct_config__.tag, tuple(batch))
                    return self._checked(Decoded(batch))
        kind, start = self._envelope(view)
        payload = view[start:]
        if kind in COLUMNS:
            return self._checked(self._columns_of(kind, payload))
        if kind not in OPEN_ENDED:
            messages = self._whole(kind, payload)
            if messages is not None:
                return Decoded(Batch(kind, tuple(messages)))
        return self._one_by_one(kind, payload)

    def _envelope(self, frame: memoryview) -> tuple[str, int]:
        """The kind of a ``[kind, version, batch]`` frame of this version and where its batch starts,
        read by hand (a frame of another version raises :class:`FrameError`): a batch
        is never skipped over (``msgspec`` would recurse into it) but decoded where it stands.
        """
        scanner = Scanner(frame, max_elements=3)
        try:
            count, position = scanner.array_header(0)
            if count == 2:
                raise FrameError("version", f"{_OLD_FRAME}; {_SPEAKS}")
            if count != 3:
                raise FrameError("bad_frame", f"{_NOT_A_FRAME}: an array of {count}")
            kind, position = scanner.string(position)
            if kind is None:
                raise FrameError("bad_frame", f"{_NOT_A_FRAME}: the kind is not a string")
            end = scanner.skip(position, 0)
        except ScanError as error:
            raise _frame_error(error, _NOT_A_FRAME) from None
        try:
            version = msgspec.msgpack.decode(frame[position:end], type=int)
        except (msgspec.ValidationError, *_UNREADABLE):
            raise FrameError("bad_frame", f"{_NOT_A_FRAME}: the version is not an int") from None
        if version != PROTOCOL_VERSION:
            raise FrameError("version", f"a frame of protocol version {version}; {_SPEAKS}")
        position = end
        if kind not in self._batch:
            known = ", ".join(sorted(self._batch))
            raise FrameError("unknown_kind", f"kind {kind[:40]!r} (expected one of {known})")
        return kind, position

    def _whole(self, kind: str, payload: memoryview) -> Any:
        """The batch decoded in one go; None if it must be read part by part (see :meth:`_decode`)."""
        try:
            return self._batch[kind].decode(payload)
        except (msgspec.ValidationError, RecursionError):
            return None
        except _UNREADABLE as error:
            raise FrameError("not_msgpack", str(error)) from None

    def _columns_of(self, kind: str, payload: memoryview) -> Decoded:
        batch = self._whole(kind, payload)
        if batch is not None:
            return Decoded(batch)
        if kind != DetokenizeBatch.KIND:
            raise FrameError("bad_frame", f"malformed {kind} columns")
        try:
            columns = self._columns.decode(payload)
        except (msgspec.ValidationError, *_UNREADABLE) as error:
            raise FrameError("bad_frame", f"{kind} frame with unusable columns: {error}") from None
        except RecursionError:
            columns = self._scanned_columns(payload)
        return self._column_by_column(columns)

    def _scanned_columns(self, payload: memoryview) -> dict[str, list[Any] | None]:
        """The columns of a detokenize batch cell by cell, each cell decoded only if it nests no
        deeper than the limit (else :data:`_DEEP`, or a row of its position and :data:`_DEEP` for
        the rows of ``opens`` and ``reasons``, so that the message it belongs to is known).
        """
        scanner = Scanner(payload, max_depth=self.max_depth, max_elements=self.max_elements)
        columns: dict[str, list[Any] | None] = {}
        try:
            count, position = scanner.map_header(0)
            for _ in range(count):
                key, position = scanner.string(position)
                if key is None or position < len(payload) and payload[position] == _NIL:
                    position = scanner.skip(position, None)
                    if key is not None:
                        columns[key] = None
                    continue
                spans, position = scanner.items(position)
                rows = key in ("opens", "reasons")
                columns[key] = [
                    (self._deep_row(scanner, payload, start) if rows else _DEEP)
                    if deep
                    else msgspec.msgpack.decode(payload[start:end])
                    for start, end, deep in spans
                ]
            if position != len(payload):
                raise ScanError("not_msgpack", f"{len(payload) - position:,} bytes after the columns")
        except ScanError as error:
            raise _frame_error(error, "detokenize frame with unusable columns") from None
        return columns

    @staticmethod
    def _deep_row(scanner: Scanner, payload: memoryview, start: int) -> Any:
        """A cell nested too deep: :data:`_DEEP`, or ``[position, _DEEP, ...]`` if it is a row
        that starts with an int (the message it is about).
        """
        try:
            count, position = scanner.array_header(start)
            if count < 2:
                return _DEEP
            end = scanner.skip(position, 0)
            first = msgspec.msgpack.decode(payload[position:end])
        except (ScanError, *_UNREADABLE):
            return _DEEP
        return [first, *[_DEEP] * (count - 1)] if count > 1 and type(first) is int else _DEEP

    def _column_by_column(self, columns: dict[str, list[Any] | None]) -> Decoded:
        """Salvage the valid messages of a detokenize batch in which some cells are malformed.

        Only cells of ``uids``, ``token_ids``, the openings and the reasons are salvaged message by
        message: the columns that say where each message is (``counts``, and the positions in
        ``finished``, ``opens`` and ``reasons``) must be exact, else no message can be trusted and
        the frame is refused.
        """
        kind = DetokenizeBatch.KIND
        try:
            uids, token_ids = columns["uids"], columns["token_ids"]
            if uids is None or token_ids is None:
                raise TypeError("uids and token_ids are required")
            size = len(uids)
            counts = columns.get("counts")
            if counts is None:
                counts = [1] * size
            if len(counts) != size or not all(type(n) is int and n >= 0 for n in counts):
                raise TypeError("counts must be one non-negative int per uid")
            if sum(counts) != len(token_ids):
                raise TypeError(f"counts add up to {sum(counts)}, not to the {len(token_ids)} token ids")
            finished = set(_positions(columns.get("finished"), size))
            pairs = columns.get("opens") or []
            if not all(isinstance(pair, list) and len(pair) == 2 for pair in pairs):
                raise TypeError("opens must be [position, opening] pairs")
            opens = dict(zip(_positions([pair[0] for pair in pairs], size), (pair[1] for pair in pairs)))
            triples = columns.get("reasons") or []
            if not all(isinstance(triple, list) and len(triple) == 3 for triple in triples):
                raise TypeError("reasons must be [position, finish_reason, matched_stop] triples")
            positions = _positions([triple[0] for triple in triples], size)
            reasons = {position: triple[1:] for position, triple in zip(positions, triples)}
        except (KeyError, TypeError) as error:
            raise FrameError("bad_frame", f"{kind} frame with unusable columns: {error}") from None
        one = self._one[kind]
        good: list[DetokenizeMsg] = []
        rejected: list[Rejected] = []
        cursor = 0
        for index, (uid, count) in enumerate(zip(uids, counts)):
            fields = {"uid": uid, "token_ids": token_ids[cursor : cursor + count]}
            fields.update(finished=index in finished, open=opens.get(index))
            if index in reasons:
                fields.update(finish_reason=reasons[index][0], matched_stop=reasons[index][1])
            cursor += count
            probe = uid if isinstance(uid, int | str) and not isinstance(uid, bool) else None
            if any(
                value is _DEEP
                for value in (uid, fields["open"], *fields["token_ids"], *reasons.get(index, ()))
            ):
                rejected.append(Rejected(kind, index, probe, self._too_deep(kind), index in opens))
                continue
            try:
                good.append(one.decode(_encoder.encode(fields)))
            except (msgspec.ValidationError, *_UNREADABLE, RecursionError, TypeError) as error:
                reason = f"malformed {kind} message: {error}"
                rejected.append(Rejected(kind, index, probe, reason, index in opens))
        return Decoded(DetokenizeBatch.of(good), tuple(rejected))

    def _checked(self, decoded: Decoded) -> Decoded:
        """``decoded`` without the detokenize messages whose opening's extras nest too deep (the
        one part of a detokenize message that may hold values of any shape).
        """
        batch = decoded.batch
        if not isinstance(batch, DetokenizeBatch) or not batch.opens:
            return decoded
        limit = self.max_depth - _OPENING_DEPTH
        deep = {
            p
            for p, opening in batch.opens
            if opening.params.extra and _depth(opening.params.extra, limit) > limit
        }
        if not deep:
            return decoded
        kind, items = batch.KIND, batch.items
        rejected = [Rejected(kind, p, items[p].uid, self._too_deep(kind), True) for p in sorted(deep)]
        kept = DetokenizeBatch.of([message for p, message in enumerate(items) if p not in deep])
        return Decoded(kept, decoded.rejected + tuple(rejected))

    def _too_deep(self, kind: str) -> str:
        return f"malformed {kind} message: more than {self.max_depth} nested arrays and maps"

    def _one_by_one(self, kind: str, payload: memoryview) -> Decoded:
        """The messages of an array, read one by one: each is scanned first (see the class), then
        decoded; a message that does not match its schema is rejected alone.
        """
        scanner = Scanner(payload, max_depth=self.max_depth, max_elements=self.max_elements)
        try:
            spans, end = scanner.items(0)
            if end != len(payload):
                raise ScanError("not_msgpack", f"{len(payload) - end:,} bytes after the messages")
        except ScanError as error:
            raise _frame_error(error, f"{kind} frame without a message list") from None
        good: list[Message] = []
        rejected: list[Rejected] = []
        one = self._one[kind]
        for index, (start, end, deep) in enumerate(spans):
            raw = payload[start:end]
            if deep:
                rejected.append(
                    Rejected(kind, index, self._deep_uid(scanner, payload, start), self._too_deep(kind))
                )
                continue
            try:
                good.append(one.decode(raw))
            except (msgspec.ValidationError, *_UNREADABLE) as error:
                rejected.append(Rejected(kind, index, self._uid(raw), f"malformed {kind} message: {error}"))
        return Decoded(Batch(kind, tuple(good)), tuple(rejected))

    def _uid(self, raw: memoryview) -> Uid | None:
        try:
            return self._probe.decode(raw).uid
        except (msgspec.ValidationError, *_UNREADABLE):
            return None

    def _deep_uid(self, scanner: Scanner, payload: memoryview, start: int) -> Uid | None:
        """The uid of a message nested too deep to decode, found by scanning its map's keys."""
        try:
            pairs, _ = scanner.pairs(start)
        except ScanError:
            return None
        for key, begin, end in pairs:
            if key == "uid":
                try:
                    uid: Uid = self._uid_decoder.decode(payload[begin:end])
                except (msgspec.ValidationError, *_UNREADABLE, RecursionError):
                    return None
                return uid
        return None


_NOT_A_FRAME = "not a [kind, version, messages] frame"
_SPEAKS = f"this side speaks version {PROTOCOL_VERSION}: refused unread"
_OLD_FRAME = "a [kind, messages] frame of protocol version 1"

_NIL = 0xC0
"""msgpack's nil."""

_OPENING_DEPTH = 3
"""A detokenize message's levels above its opening's extras: the message, the opening, its params."""


class _Deep:
    """Marks a cell nested deeper than the limit (never decoded)."""

    def __repr__(self) -> str:
        return "<nested too deep>"


_DEEP = _Deep()


def _depth(value: Any, limit: int) -> int:
    """How many lists and dicts nest in ``value`` (a dict of depth 1 holds no list or dict), read
    without recursion; stops counting past ``limit``.
    """
    deepest = 0
    pending = [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > limit:
            break
        pending.extend((child, level + 1) for child in children)
    return deepest


def _frame_error(error: ScanError, what: str) -> FrameError:
    """The :class:`FrameError` for a frame the scanner refused."""
    reason = {"bad_shape": "bad_frame"}.get(error.reason, error.reason)
    return FrameError(reason, f"{what}: {error.detail}")


@attrs.define
class DropCounter:
    """Counts dropped frames and messages by reason, logging only the first of each reason."""

    logger: logging.Logger
    counts: dict[str, int] = attrs.field(factory=dict)

    def drop(self, reason: str, detail: str) -> None:
        """Count one drop; log it if it is the first for ``reason``."""
        seen = self.counts.get(reason, 0)
        self.counts[reason] = seen + 1
        if not seen:
            self.logger.warning("dropped (%s): %s; later drops of this kind are only counted", reason, detail)

    def count(self, reason: str, detail: str) -> None:
        """Count one event that may or may not have cost a frame (a sender's connection closed:
        ZeroMQ reports a peer that went away and a frame it refused over its size limit alike),
        logged at DEBUG only: a normal disconnect is not a fault.
        """
        self.counts[reason] = self.counts.get(reason, 0) + 1
        self.logger.debug("%s: %s", reason, detail)
