"""The two records of the core: :class:`Codec` (how a tokenizer decodes) and :class:`DecodeState`."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Literal, TypeAlias

import attrs

from puredetok._core.classes import classes_of
from puredetok._core.decoding import Decoding
from puredetok._core.saving import STATE_FORMAT, check_hold, pack, unpack

OutOfVocab: TypeAlias = Literal["raise", "ignore"]
"""What a codec does with an id at or above its vocabulary size: raise :class:`InvalidTokenError`
(the default), or ignore it, as ``tokenizer.decode`` does."""

OUT_OF_VOCAB: tuple[OutOfVocab, ...] = ("raise", "ignore")
"""The values of :data:`OutOfVocab`."""

ID_LIMIT = 2**32
"""Ids from here on are refused even with ``out_of_vocab="ignore"``: ``tokenizers`` stores ids as
32-bit unsigned integers, and ``tokenizer.decode`` raises ``OverflowError`` for larger ones."""


@attrs.frozen
class Codec:
    """An immutable model of how one tokenizer decodes, with fixed decode options.

    Build it with :func:`puredetok.codec_for`. Two codecs are equal when they decode identically
    (same vocabulary, decoder and options), whatever object they were built from.
    """

    family: str
    """The decoder family: ``"byte_level"``, ``"sentencepiece"``, ``"metaspace"``, ``"wordpiece"``,
    ``"spaces"``, a ``"+"``-joined chain of decoder names, a ``transformers`` class that decodes in
    Python (``"byt5"``, ``"whisper"``, ``"clip"``, ``"ctc"``, ``"marian"``), or ``"window"`` (the
    generic fallback)."""
    exact: bool
    """True when the streamed text provably equals ``tokenizer.decode``; False for the fallback."""
    reason: str
    """How the codec models the decoder, or why it could not do so exactly."""
    vocab_size: int
    """Valid ids are ``0 <= id < vocab_size``."""
    skip_special_tokens: bool
    """Whether special tokens are dropped, as ``decode(..., skip_special_tokens=True)`` does."""
    clean_up_tokenization_spaces: bool
    """Whether ``transformers``' space cleanup applies (after its BPE exception is resolved)."""
    fingerprint: str
    """A digest of everything that decides the decoded text."""
    name: str = attrs.field(eq=False)
    """Where the tokenizer came from (its ``name_or_path``), for messages only."""
    decoding: Decoding = attrs.field(eq=False, repr=False)
    """The streaming model."""
    added_ids: frozenset[int] = attrs.field(default=frozenset(), eq=False, repr=False)
    """The ids of added tokens (the special tokens among them)."""
    out_of_vocab: OutOfVocab = "raise"
    """What an id in ``[vocab_size, 2**32)`` does: ``"raise"`` (:class:`InvalidTokenError`) or
    ``"ignore"`` (it decodes to nothing, as in ``tokenizer.decode``; see
    ``codec_for(..., out_of_vocab=...)``). Negative and non-integer ids always raise."""
    basis: str = attrs.field(default="", eq=False, repr=False)
    """For an exact codec: the digest of everything that decides its text but the byte-run cap
    (from which :func:`~puredetok._build.build.with_max_byte_run` derives another cap's codec); ""
    for the fallback."""
    classes: tuple[int, ...] = attrs.field(init=False, eq=False, repr=False)
    """Per id, the character classes of its fast text and whether it is an added token (see
    :mod:`puredetok._core.classes`): lets a layer above skip tokens that cannot hold what it looks
    for without reading their text (derived)."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "classes", classes_of(self.decoding.fast, self.added_ids))

    def __copy__(self) -> Codec:
        return self

    def sharing(self, **changes: Any) -> Codec:
        """This codec with ``changes`` to its fields, sharing its per-id ``classes`` (only for a
        change that leaves the fast texts, ``decoding.fast``, as they are: it is not recomputed).
        """
        derived: Codec = object.__new__(Codec)
        for field in attrs.fields(Codec):
            object.__setattr__(derived, field.name, changes.get(field.name, getattr(self, field.name)))
        return derived

    def __deepcopy__(self, memo: dict[int, Any]) -> Codec:
        return self


@attrs.frozen
class DecodeState:
    """Where a stream stands: its codec and the little it still holds back.

    Immutable and hashable; copy it or keep it anywhere, and stepping it again gives the same
    future. Its size does not grow with the stream (see the guarantees for the one documented
    exception, a still-valid byte-fallback run). It travels without its codec: :meth:`to_bytes`
    is a few dozen bytes, and a pickled state unpickles as a :class:`SavedState`, which
    ``saved.resume(codec)`` turns back into the state (the codec's tables never travel with it).
    """

    codec: Codec
    hold: Hashable
    """The decoder's memory: a small immutable value (bytes, tuples, ints, strings); after a prompt
    whose text the output may still repeat, an :class:`~puredetok._core.echo.Echo` that holds it
    with that text (contract C)."""

    def __copy__(self) -> DecodeState:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> DecodeState:
        return self

    def to_bytes(self) -> bytes:
        """This state without its codec: a few dozen bytes (see :mod:`puredetok._core.saving`).

        :meth:`from_bytes` with a codec of the same fingerprint gives an equal state, which
        continues exactly as this one would.
        """
        return pack(STATE_FORMAT, self.codec, self.hold)

    @classmethod
    def from_bytes(cls, codec: Codec, data: bytes | bytearray | memoryview) -> DecodeState:
        """The state saved by :meth:`to_bytes`, resumed with ``codec``.

        Raises :class:`~puredetok.errors.CodecMismatchError` when ``codec``'s fingerprint is not
        the one the state was saved with, and :class:`~puredetok.errors.InvalidStateError` for
        truncated, corrupt or hostile bytes (both are ``ValueError``).
        """
        return cls(codec, check_hold(codec, unpack(STATE_FORMAT, codec, data, "state")))

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled as its bytes (the codec stays behind): a SavedState, which resume(codec) turns back
        return (SavedState, (self.to_bytes(),))


@attrs.frozen
class SavedState:
    """A :class:`DecodeState` without its codec: what a pickled state unpickles as.

    ``pickle.loads(pickle.dumps(state)).resume(codec) == state`` for the state's codec (or an equal
    one: the fingerprint is checked). A few dozen bytes, where the codec is megabytes.
    """

    # A pickle names a class by its module: its public one, so that saved pickles outlive the
    # private layout (older pickles name puredetok.core.codec, which puredetok/core/ keeps).
    __module__ = "puredetok"

    data: bytes = attrs.field(validator=attrs.validators.instance_of(bytes))
    """:meth:`DecodeState.to_bytes` of the state."""

    def resume(self, codec: Codec) -> DecodeState:
        """The state, with ``codec``; raises :class:`~puredetok.errors.CodecMismatchError` for a codec
        with another fingerprint and :class:`~puredetok.errors.InvalidStateError` for bad bytes.
        """
        return DecodeState.from_bytes(codec, self.data)
