"""The wire format: typed msgpack frames, checked against the message schema. Never pickle.

A frame is the msgpack array ``[kind, batch]``: one batch of messages of one kind. For the kinds
that flow per token (``"detokenize"``, ``"reply"``) the batch is a map of columns
(:class:`~puredetok.adapters.messages.DetokenizeBatch`, :class:`~puredetok.adapters.messages.ReplyBatch`);
for the others it is an array of messages, each a map of its fields. Decoding checks every
field's type. A frame that cannot be read at all (too large, not msgpack, not ``[str, batch]``,
an unknown kind) raises :class:`FrameError`; a frame in which only some messages are malformed
gives the good ones and a :class:`Rejected` note for each bad one, with its uid when that much
could be read, so that the sender of that one request can be told.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "FrameError",
    "Rejected",
    "Decoded",
    "FrameDecoder",
    "encode_batch",
    "encode_frame",
    "DropCounter",
]

import logging
import types
from collections.abc import Iterable, Sequence
from typing import Any, cast

import attrs
import msgspec

from puredetok.adapters.messages import (
    COLUMNS,
    INBOUND,
    AnyBatch,
    Batch,
    DetokenizeBatch,
    DetokenizeMsg,
    Message,
    ReplyBatch,
    Uid,
    UserReply,
)

DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Frames larger than this are dropped unread (64 MiB; configurable per decoder)."""

_encoder = msgspec.msgpack.Encoder()


class FrameError(ValueError):
    """A frame that cannot be read at all; ``reason`` is a short tag for counting."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


@attrs.frozen
class Rejected:
    """One message of a frame that did not match its schema."""

    kind: str
    index: int
    """Its position in the frame."""
    uid: Uid | None
    """Its uid, when at least that field could be read."""
    reason: str


@attrs.frozen
class Decoded:
    """A decoded frame: the valid messages as a batch, and the rejected ones."""

    batch: AnyBatch
    rejected: tuple[Rejected, ...] = ()


class _UidProbe(msgspec.Struct):
    uid: Uid | None = None


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
    return _encoder.encode((kind, messages))


def encode_frame(batch: AnyBatch) -> bytes:
    """One frame holding ``batch``."""
    if isinstance(batch, Batch):
        return encode_batch(batch.items)
    return _encoder.encode((batch.kind, batch))


def _positions(values: list[Any] | None, size: int) -> list[int]:
    """Positions of messages in a batch of ``size``: exact ints in range, else TypeError."""
    positions = values or []
    if not all(type(position) is int and 0 <= position < size for position in positions):
        raise TypeError(f"positions must be ints in [0, {size})")
    return positions


class FrameDecoder:
    """Reads frames of the given message kinds (by default, what a worker accepts)."""

    def __init__(
        self, kinds: Iterable[type[Message]] = INBOUND, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._frame = msgspec.msgpack.Decoder(tuple[str, msgspec.Raw])
        self._items = msgspec.msgpack.Decoder(list[msgspec.Raw])
        self._probe = msgspec.msgpack.Decoder(_UidProbe)
        self._batch: dict[str, msgspec.msgpack.Decoder[Any]] = {}
        self._one: dict[str, msgspec.msgpack.Decoder[Any]] = {}
        self._columns = msgspec.msgpack.Decoder(dict[str, list[Any] | None])
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
            kind, payload = self._frame.decode(frame)
        except msgspec.ValidationError as error:
            raise FrameError("bad_frame", f"not a [kind, messages] frame: {error}") from None
        except msgspec.DecodeError as error:
            raise FrameError("not_msgpack", str(error)) from None
        batch_decoder = self._batch.get(kind)
        if batch_decoder is None:
            known = ", ".join(sorted(self._batch))
            raise FrameError("unknown_kind", f"kind {kind[:40]!r} (expected one of {known})")
        try:
            decoded = batch_decoder.decode(payload)
        except (msgspec.ValidationError, msgspec.DecodeError):
            if kind == DetokenizeBatch.KIND:
                return self._column_by_column(payload)
            if kind in COLUMNS:
                raise FrameError("bad_frame", f"malformed {kind} columns") from None
            return self._one_by_one(kind, payload)
        if kind in COLUMNS:
            return Decoded(decoded)
        return Decoded(Batch(kind, tuple(decoded)))

    def _column_by_column(self, payload: msgspec.Raw) -> Decoded:
        """Salvage the valid messages of a detokenize batch in which some cells are malformed.

        Only cells of ``uids``, ``token_ids``, the openings and the reasons are salvaged message by
        message: the columns that say where each message is (``counts``, and the positions in
        ``finished``, ``opens`` and ``reasons``) must be exact, else no message can be trusted and
        the frame is refused.
        """
        kind = DetokenizeBatch.KIND
        try:
            columns = self._columns.decode(payload)
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
        except (msgspec.ValidationError, msgspec.DecodeError, KeyError, TypeError) as error:
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
            try:
                good.append(one.decode(_encoder.encode(fields)))
            except (msgspec.ValidationError, msgspec.DecodeError) as error:
                probe = uid if isinstance(uid, int | str) and not isinstance(uid, bool) else None
                rejected.append(Rejected(kind, index, probe, f"malformed {kind} message: {error}"))
        return Decoded(DetokenizeBatch.of(good), tuple(rejected))

    def _one_by_one(self, kind: str, payload: msgspec.Raw) -> Decoded:
        """Salvage the valid messages of a frame in which some are malformed."""
        try:
            raws = self._items.decode(payload)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            raise FrameError("bad_frame", f"{kind} frame without a message list: {error}") from None
        good: list[Message] = []
        rejected: list[Rejected] = []
        one = self._one[kind]
        for index, raw in enumerate(raws):
            try:
                good.append(one.decode(raw))
            except (msgspec.ValidationError, msgspec.DecodeError) as error:
                rejected.append(Rejected(kind, index, self._uid(raw), f"malformed {kind} message: {error}"))
        return Decoded(Batch(kind, tuple(good)), tuple(rejected))

    def _uid(self, raw: msgspec.Raw) -> Uid | None:
        try:
            return self._probe.decode(raw).uid
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None


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
