"""The exceptions puredetok raises, and how every option's value is checked alike (``flag``,
``whole``, ``choice``: a value of the wrong type is an :class:`OptionTypeError` naming the option,
never taken for its truth value; a number out of its range a :class:`ValueError` naming it).
"""

from __future__ import annotations

import operator
from typing import Any, Final, SupportsIndex, cast

__all__ = [
    "PuredetokError",
    "InvalidTokenError",
    "StreamFinishedError",
    "UnsupportedTokenizerError",
    "InvalidStateError",
    "CodecMismatchError",
    "StateTypeError",
    "OptionTypeError",
]


class PuredetokError(Exception):
    """The base of every exception puredetok defines: ``except PuredetokError`` catches whatever
    the package raises of its own (each also keeps the built-in base it had, ``ValueError``,
    ``TypeError`` ..., so code that caught those still does).
    """


class InvalidTokenError(PuredetokError, ValueError):
    """A token id that is not in the codec's vocabulary (negative, too large, or not an int).

    The state the id was offered to is untouched and still valid. ``why`` replaces the usual
    explanation after the id (a caller that gives one names the vocabulary size in it).
    """

    def __init__(
        self, token_id: object, vocab_size: int, position: int | None = None, *, why: str | None = None
    ) -> None:
        self.token_id = token_id
        self.vocab_size = vocab_size
        self.position = position
        where = "" if position is None else f" at position {position}"
        if why is None:
            if isinstance(token_id, int) and not isinstance(token_id, bool):
                why = f"outside the vocabulary [0, {vocab_size})"
            else:
                why = f"not an int (got {type(token_id).__name__}); the vocabulary is [0, {vocab_size})"
        super().__init__(f"invalid token id {token_id!r}{where}: {why}")

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt as it was (its message, its attributes): its __init__ takes other arguments
        return (type(self).__new__, (type(self), *self.args), self.__dict__)


class UnsupportedTokenizerError(PuredetokError, TypeError):
    """`codec_for` was given an object it cannot read as a tokenizer."""


class StreamFinishedError(PuredetokError, ValueError):
    """A token offered to a stream that has already finished (by a stop, its length limit, or abort).

    The stream is untouched; its ``finish_reason`` says why it ended.
    """


class InvalidStateError(PuredetokError, ValueError):
    """Bytes that are not a saved state (or stream) a codec can resume: truncated, corrupt, of
    another kind, or holding a value the codec's decoder cannot take. Nothing is changed.
    """


class CodecMismatchError(InvalidStateError):
    """A saved state (or stream) offered to a codec whose fingerprint is not the one it was saved
    with: another tokenizer, or the same one with other decode options.
    """


class StateTypeError(PuredetokError, TypeError):
    """A value handed where a state (a :class:`~puredetok.DecodeState`) or a stream (a
    :class:`~puredetok.Stream`) is expected. A saved one, a ``SavedState`` or a ``SavedStream``
    (what a pickled state or stream unpickles as: it travels without its codec), is resumed with
    its codec first, ``saved.resume(codec)``: the message says so.
    """

    def __init__(self, function: str, expected: str, value: object, position: int | None = None) -> None:
        where = "" if position is None else f" at position {position}"
        if hasattr(value, "resume"):
            why = "a pickled state or stream unpickles as one, without its codec: saved.resume(codec)"
        elif expected == "Stream":
            why = "a Stream comes from open_stream(codec, rules); step() advances a DecodeState"
        else:
            why = "a DecodeState comes from start(codec); advance() advances a Stream (its .decode is one)"
        super().__init__(f"{function}() takes a {expected}, got {type(value).__name__}{where}: {why}")

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt as it was (its message): its __init__ takes other arguments
        return (type(self).__new__, (type(self), *self.args), self.__dict__)


class OptionTypeError(PuredetokError, TypeError, ValueError):
    """An option or parameter given a value of the wrong type (``skip_special_tokens="false"``,
    ``max_tokens="5"``), naming it: a :class:`TypeError`, and a :class:`ValueError` too, which is
    what such values raised before they were all checked alike.
    """


MAX_INT: Final = 2**63 - 1
"""The largest token id, token limit or count any option or message takes: the largest int a
saved state holds (:mod:`puredetok._core.saving` writes signed 64-bit ints), so that whatever a
request was opened with, a stopping worker can hand it back."""


def flag(name: str, value: object) -> bool:
    """``value``, which must be a bool (an :class:`OptionTypeError` naming ``name`` if not)."""
    if type(value) is not bool:
        raise OptionTypeError(f"{name} must be True or False, not {type(value).__name__} {value!r:.60}")
    return value


def optional_flag(name: str, value: object) -> bool | None:
    """``value``, which must be a bool or None."""
    return None if value is None else flag(name, value)


def whole(name: str, value: object, low: int, high: int = MAX_INT) -> int:
    """``value`` as an int in ``[low, high]``: it must be an int or an integer type's value (a
    NumPy int; never a bool), else an :class:`OptionTypeError`; out of range, a :class:`ValueError`;
    each naming ``name``.
    """
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise OptionTypeError(f"{name} must be an int, not {type(value).__name__} {value!r:.60}")
    number = operator.index(cast(SupportsIndex, value))
    if number < low:
        raise ValueError(f"{name} must be {'a positive int' if low == 1 else f'>= {low}'}, not {number}")
    if number > high:
        why = " (2**63 - 1: the largest int a saved state holds)" if high == MAX_INT else ""
        raise ValueError(f"{name} must be <= {high}{why}, not {number}")
    return number


def optional_whole(name: str, value: object, low: int, high: int = MAX_INT) -> int | None:
    """``value``, which must be None or an int in ``[low, high]`` (see :func:`whole`)."""
    return None if value is None else whole(name, value, low, high)


def choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """``value``, which must be one of the strings ``choices`` (an :class:`OptionTypeError` if it
    is not a string, a :class:`ValueError` if it is another one, each naming ``name``).
    """
    expected = f"{name} must be {' or '.join(map(repr, choices))}"
    if type(value) is not str:
        raise OptionTypeError(f"{expected}, not {type(value).__name__} {value!r:.60}")
    if value not in choices:
        raise ValueError(f"{expected}, not {value!r:.60}")
    return value
