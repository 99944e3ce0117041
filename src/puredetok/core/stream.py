"""The public streaming functions: ``start``, ``step``, ``feed``, ``finish``.

Each is pure: it reads a :class:`~puredetok.core.codec.DecodeState` and returns a new one (or the
same one, when nothing changed) with the text that became certain.

``step_hold`` and ``finish_hold`` are ``step`` and ``finish`` on a bare hold, for a layer that
keeps the hold in a record of its own (the stop layer's :class:`~puredetok.stops.Stream`).
"""

from __future__ import annotations

__all__ = ["start", "step", "feed", "finish", "step_hold", "finish_hold", "check_token", "admit_token"]

import operator
from array import array
from collections.abc import Hashable, Iterable
from typing import Any, SupportsIndex, cast

from puredetok.core.codec import ID_LIMIT, Codec, DecodeState
from puredetok.core.echo import Echo, consume, consume_tail
from puredetok.errors import InvalidTokenError

# A stream makes a new state for each token that changes it: filling the two slots of a fresh
# object directly costs two thirds of attrs' generated __init__ (which has nothing to check here).
_new = object.__new__
_set_codec = DecodeState.__dict__["codec"].__set__
_set_hold = DecodeState.__dict__["hold"].__set__


def _state(codec: Codec, hold: object) -> DecodeState:
    state: DecodeState = _new(DecodeState)
    _set_codec(state, codec)
    _set_hold(state, hold)
    return state


def check_token(token_id: object, vocab_size: int, position: int | None = None) -> int:
    """``token_id`` as an int inside ``[0, vocab_size)``, or :class:`InvalidTokenError`.

    Integers of other types (NumPy's, for example) are accepted through ``__index__``; ``bool``
    is not an id.
    """
    if type(token_id) is int:
        value = token_id
    elif isinstance(token_id, bool) or not hasattr(type(token_id), "__index__"):
        raise InvalidTokenError(token_id, vocab_size, position)
    else:
        value = operator.index(cast(SupportsIndex, token_id))
    if not 0 <= value < vocab_size:
        raise InvalidTokenError(token_id, vocab_size, position)
    return value


def admit_token(codec: Codec, token_id: object, position: int | None = None) -> int:
    """``token_id`` as an int that ``codec`` takes, or :class:`InvalidTokenError`.

    That is an id inside the vocabulary, or with ``codec.out_of_vocab == "ignore"`` also one in
    ``[vocab_size, 2**32)``, which the streaming functions then ignore (it decodes to nothing).
    """
    size = codec.vocab_size
    if codec.out_of_vocab == "raise":
        return check_token(token_id, size, position)
    try:
        return check_token(token_id, ID_LIMIT, position)
    except InvalidTokenError:
        why = None
        if not isinstance(token_id, bool) and hasattr(type(token_id), "__index__"):
            if operator.index(cast(SupportsIndex, token_id)) >= ID_LIMIT:
                why = (
                    f"past the vocabulary [0, {size}) and not below 2**32, where tokenizer.decode "
                    "stops taking ids (ids in between are ignored)"
                )
        raise InvalidTokenError(token_id, size, position, why=why) from None


def start(codec: Codec, prompt_ids: Iterable[int] = ()) -> DecodeState:
    """A fresh stream; with ``prompt_ids``, one that continues after that prompt (contract C).

    The output's text is ``decode(prompt + output)`` after the longest prefix it shares with
    ``decode(prompt)``: what the prompt already showed is never emitted again, and where the output
    changes the prompt's own tail (a byte run poisoned, a space removed, a split character
    completed) the changed text is emitted (see :mod:`puredetok.core.echo`).
    """
    state = DecodeState(codec, codec.decoding.initial)
    prompt = list(prompt_ids)
    if prompt:
        state, _ = feed(state, prompt)
        echo = finish(state)
        if echo:
            state = _state(codec, Echo(state.hold, echo))
    return state


def step(state: DecodeState, token_id: int) -> tuple[DecodeState, str]:
    """Advance by one token id: ``(new_state, delta)``; ``delta`` is the text that became certain.

    Raises :class:`InvalidTokenError` for an id outside the vocabulary (unless the codec ignores
    ids past it); ``state`` stays valid.
    """
    codec = state.codec
    if type(token_id) is not int or not 0 <= token_id < codec.vocab_size:
        token_id = admit_token(codec, token_id)
        if token_id >= codec.vocab_size:
            return state, ""
    decoding = codec.decoding
    old = state.hold
    if old is decoding.idle:
        text = decoding.fast[token_id]
        if text is not None:
            return state, text
    if type(old) is Echo:
        hold, delta = decoding.step(old.hold, token_id)
        hold, delta = consume(old, hold, delta)
    else:
        hold, delta = decoding.step(old, token_id)
    if hold is old:
        return state, delta
    return _state(codec, hold), delta


def step_hold(codec: Codec, hold: Hashable, token_id: int) -> tuple[Hashable, str]:
    """:func:`step` on a bare hold: ``(new_hold, delta)``, the new hold being ``hold`` itself when
    nothing changed. Raises :class:`InvalidTokenError` as :func:`step` does.
    """
    if type(token_id) is not int or not 0 <= token_id < codec.vocab_size:
        token_id = admit_token(codec, token_id)
        if token_id >= codec.vocab_size:
            return hold, ""
    decoding = codec.decoding
    if hold is decoding.idle:
        text = decoding.fast[token_id]
        if text is not None:
            return hold, text
    if type(hold) is Echo:
        new, delta = decoding.step(hold.hold, token_id)
        return consume(hold, new, delta)
    return decoding.step(hold, token_id)


_INTS = {int}
_INTEGER_ARRAY_CODES = frozenset("bBhHiIlLqQ")


def _integer_vector(values: object) -> bool:
    """A NumPy integer vector (duck-typed: the core does not import NumPy)."""
    kind = getattr(getattr(values, "dtype", None), "kind", "")
    return kind in ("i", "u") and getattr(values, "ndim", 0) == 1


def _checked(token_ids: Iterable[int], codec: Codec) -> list[int]:
    """The ids as a list of ints inside the vocabulary, or :class:`InvalidTokenError` naming the
    first bad one (ids past the vocabulary that the codec ignores are left out). A list is checked
    in three C-level passes (types, minimum, maximum); an integer ``array.array`` or NumPy array
    cannot hold a non-integer, so only its range is checked.
    """
    size = codec.vocab_size
    if type(token_ids) is list:
        ids = token_ids
    elif isinstance(token_ids, array) and token_ids.typecode in _INTEGER_ARRAY_CODES:
        ids = token_ids.tolist()
        if not ids or (min(ids) >= 0 and max(ids) < size):
            return ids
    elif _integer_vector(token_ids):
        vector: Any = token_ids
        if not len(vector) or (vector.min() >= 0 and vector.max() < size):
            return cast(list[int], vector.tolist())
        ids = vector.tolist()
    else:
        ids = list(token_ids)
    if not ids:
        return ids
    try:
        if set(map(type, ids)) == _INTS and min(ids) >= 0 and max(ids) < size:
            return ids
    except TypeError:  # values that do not even compare
        pass
    admitted = [admit_token(codec, token_id, position) for position, token_id in enumerate(ids)]
    return [token_id for token_id in admitted if token_id < size]


def feed(state: DecodeState, token_ids: Iterable[int]) -> tuple[DecodeState, str]:
    """Advance by several ids; the same state and text as stepping them one by one.

    Every id is checked before any is decoded: on :class:`InvalidTokenError` (which names the id's
    position) nothing has happened.
    """
    codec = state.codec
    old = state.hold
    ids = _checked(token_ids, codec)
    if type(old) is Echo:
        hold, delta = codec.decoding.feed(old.hold, ids)
        hold, delta = consume(old, hold, delta)
    else:
        hold, delta = codec.decoding.feed(old, ids)
    if hold is old:
        return state, delta
    return _state(codec, hold), delta


def finish(state: DecodeState) -> str:
    """The text still held back, ended as the full decode ends it (the final flush)."""
    return finish_hold(state.codec, state.hold)


def finish_hold(codec: Codec, hold: Hashable) -> str:
    """:func:`finish` on a bare hold."""
    if type(hold) is Echo:
        return consume_tail(hold, codec.decoding.finish(hold.hold))
    return codec.decoding.finish(hold)
