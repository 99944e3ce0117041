"""The public streaming functions: ``start``, ``step``, ``feed``, ``finish``.

Each is pure: it reads a :class:`~puredetok.core.codec.DecodeState` and returns a new one (or the
same one, when nothing changed) with the text that became certain.
"""

from __future__ import annotations

__all__ = ["start", "step", "feed", "finish", "check_token"]

import operator
from array import array
from collections.abc import Iterable
from typing import Any, SupportsIndex, cast

from puredetok.core.codec import Codec, DecodeState
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


def start(codec: Codec, prompt_ids: Iterable[int] = ()) -> DecodeState:
    """A fresh stream; with ``prompt_ids``, one that continues after that prompt.

    The prompt's text is never emitted: the first deltas continue ``decode(prompt)`` from the
    longest prefix that no continuation can change (contract C).
    """
    state = DecodeState(codec, codec.decoding.initial)
    prompt = list(prompt_ids)
    if prompt:
        state, _ = feed(state, prompt)
    return state


def step(state: DecodeState, token_id: int) -> tuple[DecodeState, str]:
    """Advance by one token id: ``(new_state, delta)``; ``delta`` is the text that became certain.

    Raises :class:`InvalidTokenError` for an id outside the vocabulary; ``state`` stays valid.
    """
    codec = state.codec
    if type(token_id) is not int or not 0 <= token_id < codec.vocab_size:
        token_id = check_token(token_id, codec.vocab_size)
    decoding = codec.decoding
    old = state.hold
    if old is decoding.idle:
        text = decoding.fast[token_id]
        if text is not None:
            return state, text
    hold, delta = decoding.step(old, token_id)
    if hold is old:
        return state, delta
    return _state(codec, hold), delta


_INTS = {int}
_INTEGER_ARRAY_CODES = frozenset("bBhHiIlLqQ")


def _integer_vector(values: object) -> bool:
    """A NumPy integer vector (duck-typed: the core does not import NumPy)."""
    kind = getattr(getattr(values, "dtype", None), "kind", "")
    return kind in ("i", "u") and getattr(values, "ndim", 0) == 1


def _checked(token_ids: Iterable[int], size: int) -> list[int]:
    """The ids as a list of ints inside the vocabulary, or :class:`InvalidTokenError` naming the
    first bad one. A list is checked in three C-level passes (types, minimum, maximum); an integer
    ``array.array`` or NumPy array cannot hold a non-integer, so only its range is checked.
    """
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
    return [check_token(token_id, size, position) for position, token_id in enumerate(ids)]


def feed(state: DecodeState, token_ids: Iterable[int]) -> tuple[DecodeState, str]:
    """Advance by several ids; the same state and text as stepping them one by one.

    Every id is checked before any is decoded: on :class:`InvalidTokenError` (which names the id's
    position) nothing has happened.
    """
    codec = state.codec
    hold, delta = codec.decoding.feed(state.hold, _checked(token_ids, codec.vocab_size))
    if hold is state.hold:
        return state, delta
    return _state(codec, hold), delta


def finish(state: DecodeState) -> str:
    """The text still held back, ended as the full decode ends it (the final flush)."""
    return state.codec.decoding.finish(state.hold)
