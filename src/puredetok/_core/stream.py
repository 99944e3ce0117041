"""The public streaming functions: ``start``, ``step``, ``feed``, ``finish``.

Each is pure: it reads a :class:`~puredetok._core.codec.DecodeState` and returns a new one (or the
same one, when nothing changed) with the text that became certain.

A layer that keeps the core's hold in a record of its own (the stop layer's
:class:`~puredetok.stops.Stream`) uses the same functions on a bare hold (``step_hold``,
``feed_hold``, ``finish_hold``) and the core's steady path, :func:`steady`: for the hold most
tokens leave behind (the steady hold), the delta of every id that leaves it so (its steady text),
one tuple lookup per token.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, SupportsIndex, cast

from puredetok._core.codec import ID_LIMIT, Codec, DecodeState
from puredetok._core.echo import Echo, consume, consume_tail
from puredetok.errors import InvalidTokenError, StateTypeError

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
    is not an id, nor is NumPy's (whose ``__index__`` NumPy 1 still has).
    """
    if type(token_id) is int:
        value = token_id
    elif isinstance(token_id, bool) or not hasattr(type(token_id), "__index__") or _boolean(token_id):
        raise InvalidTokenError(token_id, vocab_size, position)
    else:
        value = operator.index(cast(SupportsIndex, token_id))
    if not 0 <= value < vocab_size:
        raise InvalidTokenError(token_id, vocab_size, position)
    return value


def _boolean(value: object) -> bool:
    """A NumPy boolean scalar (duck-typed: the core does not import NumPy)."""
    return getattr(getattr(value, "dtype", None), "kind", "") == "b"


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
        if not isinstance(token_id, bool) and hasattr(type(token_id), "__index__") and not _boolean(token_id):
            if operator.index(cast(SupportsIndex, token_id)) >= ID_LIMIT:
                why = (
                    f"past the vocabulary [0, {size}) and not below 2**32, where tokenizer.decode "
                    "stops taking ids (ids in between are ignored)"
                )
        raise InvalidTokenError(token_id, size, position, why=why) from None


def steady(codec: Codec) -> tuple[Hashable, Sequence[str | None]]:
    """The core's steady path: ``(hold, texts)``, the steady hold (the one most tokens leave
    behind) and, per id, its steady text: the text of a step from it that leaves the hold as it is
    (None for an id that changes it).

    While a stream's hold *is* that object (identity, not equality), an id ``i`` inside the
    vocabulary with ``texts[i]`` not None steps to the same hold with delta ``texts[i]``: one tuple
    lookup. Every other id, or any other hold (a byte held, a prompt's echo), goes through
    :func:`step_hold`. :func:`step` and :func:`feed` take this path; a layer above that keeps the
    hold in a record of its own takes it too, keeping the pair beside its record.
    """
    decoding = codec.decoding
    return decoding.idle, decoding.fast


def start(codec: Codec, prompt_ids: Iterable[int] = ()) -> DecodeState:
    """A fresh stream; with ``prompt_ids``, one that continues after that prompt (contract C).

    The output's text is ``decode(prompt + output)`` after the longest prefix it shares with
    ``decode(prompt)``: what the prompt already showed is never emitted again, and where the output
    changes the prompt's own tail (a byte run poisoned, a space removed, a split character
    completed) the changed text is emitted (see :mod:`puredetok._core.echo`).

    Only the prompt's tail is read, from the end: the decoding model says from which id on its
    hold is determined (``tail_start``: for most models within the last few ids; a byte-fallback
    run held at the end is read whole). A sequence (a list, a tuple, an ``array.array``, a NumPy
    vector) is read by index there; any other iterable is read whole first. The ids before that
    point are only checked (in C-level passes over them, as :func:`feed` checks a long run): a
    bad id anywhere raises :class:`InvalidTokenError` naming its position in the prompt.
    """
    decoding = codec.decoding
    prompt: Any = prompt_ids
    if type(prompt) is not list and not isinstance(prompt, Sequence) and not _integer_vector(prompt):
        prompt = list(prompt)
    count = len(prompt)
    if not count:
        return DecodeState(codec, decoding.initial)
    position, hold = decoding.tail_start(prompt)
    if position:  # G7 for the ids before the tail too: checked, not decoded
        head = prompt[:position]
        if position >= BATCH:
            _checked(head if type(head) is list else _as_list(head), codec)
        else:
            for at, token_id in enumerate(head):
                if type(token_id) is not int or not 0 <= token_id < codec.vocab_size:
                    admit_token(codec, token_id, at)
    state = _state(codec, hold)
    if position < count:
        if type(prompt) in (list, tuple) or isinstance(prompt, array) or _integer_vector(prompt):
            rest = prompt[position:] if position else prompt
        else:
            rest = [prompt[at] for at in range(position, count)]
        state, _ = feed(state, rest)
    echo = finish(state)
    if echo:
        state = _state(codec, Echo(state.hold, echo))
    return state


def step(state: DecodeState, token_id: int) -> tuple[DecodeState, str]:
    """Advance by one token id: ``(new_state, delta)``; ``delta`` is the text that became certain.

    Raises :class:`InvalidTokenError` for an id outside the vocabulary (unless the codec ignores
    ids past it; ``state`` stays valid), :class:`StateTypeError` for a state with no codec.
    """
    try:  # a wrong object is told from its error: a check first would cost the fast path
        codec = state.codec
    except AttributeError:
        raise StateTypeError("step", "DecodeState", state) from None
    decoding = codec.decoding
    old = state.hold
    # The steady path (see steady), written out: a function call would cost as much as the rest
    # of this path.
    if old is decoding.idle and type(token_id) is int and 0 <= token_id < codec.vocab_size:
        text = decoding.fast[token_id]
        if text is not None:
            return state, text
    if type(token_id) is not int or not 0 <= token_id < codec.vocab_size:
        token_id = admit_token(codec, token_id)
        if token_id >= codec.vocab_size:
            return state, ""
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
    if type(hold) is Echo:
        new, delta = codec.decoding.step(hold.hold, token_id)
        return consume(hold, new, delta)
    return codec.decoding.step(hold, token_id)  # the decoding takes its own steady path


_INTS = {int}
_INTEGER_ARRAY_CODES = frozenset("bBhHiIlLqQ")

BATCH = 20
"""From this many ids on, :func:`feed` hands them to the decoding model as one run (each decoder
takes the run at once: one UTF-8 decode for all of its bytes, one join); below it, it takes them
one by one on :func:`step`'s steady path, which costs less until then (the crossover measured on
Qwen3 and Llama-2 is in docs/benchmarks.md)."""


def _integer_vector(values: object) -> bool:
    """A NumPy integer vector (duck-typed: the core does not import NumPy)."""
    kind = getattr(getattr(values, "dtype", None), "kind", "")
    return kind in ("i", "u") and getattr(values, "ndim", 0) == 1


def _as_list(token_ids: Iterable[int]) -> list[Any]:
    """The ids as a list (an integer ``array.array`` or NumPy vector gives Python ints)."""
    if isinstance(token_ids, array) and token_ids.typecode in _INTEGER_ARRAY_CODES:
        return token_ids.tolist()
    if _integer_vector(token_ids):
        vector: Any = token_ids
        return cast(list[Any], vector.tolist())
    return list(token_ids)


def _checked(ids: list[Any], codec: Codec) -> list[int]:
    """The ids as ints inside the vocabulary, or :class:`InvalidTokenError` naming the first bad
    one (ids past the vocabulary that the codec ignores are left out). Checked in three C-level
    passes (types; none negative, as an unsigned array takes them; maximum) where they are all
    plain ints in range.
    """
    size = codec.vocab_size
    try:
        if set(map(type, ids)) == _INTS and array("Q", ids) and max(ids) < size:
            return ids
    except (TypeError, OverflowError):  # values that do not even compare, or a negative id
        pass
    admitted = [admit_token(codec, token_id, position) for position, token_id in enumerate(ids)]
    return [token_id for token_id in admitted if token_id < size]


def _refused_at(codec: Codec, ids: list[Any], token_id: object) -> InvalidTokenError:
    """The error for ``token_id``, naming its position in ``ids``: every id before it was taken,
    and an id equal to it in value and type would have been refused too, so its first occurrence
    as the same object is where it stands.
    """
    position = next(index for index, value in enumerate(ids) if value is token_id)
    try:
        admit_token(codec, token_id, position)
    except InvalidTokenError as error:
        return error
    raise AssertionError(f"{token_id!r} was refused, then taken")  # pragma: no cover


def feed(state: DecodeState, token_ids: Iterable[int]) -> tuple[DecodeState, str]:
    """Advance by several ids; the same state and text as stepping them one by one.

    Raises :class:`InvalidTokenError` naming the position of the first bad id; ``state`` stays
    valid (nothing is kept of the ids before it); :class:`StateTypeError` as :func:`step`.
    """
    try:  # told from the error, as in step
        codec = state.codec
    except AttributeError:
        raise StateTypeError("feed", "DecodeState", state) from None
    decoding = codec.decoding
    hold = old = state.hold
    ids = token_ids if type(token_ids) is list else _as_list(token_ids)
    if len(ids) >= BATCH:
        ids = _checked(ids, codec)
        if type(old) is Echo:
            hold, delta = decoding.feed(old.hold, ids)
            hold, delta = consume(old, hold, delta)
        else:
            hold, delta = decoding.feed(old, ids)
    else:
        steady_hold, steady_texts, size = decoding.idle, decoding.fast, codec.vocab_size
        delta = ""
        for token_id in ids:
            # step's steady path, written out (see steady): a call per id would cost more.
            if type(token_id) is int and 0 <= token_id < size:
                if hold is steady_hold:
                    text = steady_texts[token_id]
                    if text is None:
                        hold, text = decoding.step(hold, token_id)
                elif type(hold) is Echo:
                    new, text = decoding.step(hold.hold, token_id)
                    hold, text = consume(hold, new, text)
                else:
                    hold, text = decoding.step(hold, token_id)
            else:
                try:
                    hold, text = step_hold(codec, hold, token_id)
                except InvalidTokenError:
                    raise _refused_at(codec, ids, token_id) from None
            delta += text
    if hold is old:
        return state, delta
    return _state(codec, hold), delta


def feed_hold(codec: Codec, hold: Hashable, token_ids: Iterable[int]) -> tuple[Hashable, str]:
    """:func:`feed` on a bare hold: ``(new_hold, delta)``, the new hold being ``hold`` itself when
    nothing changed. Raises :class:`InvalidTokenError` as :func:`feed` does.
    """
    state, delta = feed(_state(codec, hold), token_ids)
    return state.hold, delta


def finish(state: DecodeState) -> str:
    """The text still held back, ended as the full decode ends it (the final flush)."""
    if type(state) is not DecodeState:
        raise StateTypeError("finish", "DecodeState", state)
    return finish_hold(state.codec, state.hold)


def finish_hold(codec: Codec, hold: Hashable) -> str:
    """:func:`finish` on a bare hold."""
    if type(hold) is Echo:
        return consume_tail(hold, codec.decoding.finish(hold.hold))
    return codec.decoding.finish(hold)
