"""The exceptions puredetok raises (every option's value is checked alike by
:mod:`puredetok._options`: a value of the wrong type is an :class:`OptionTypeError` naming the
option, a number out of its range a :class:`ValueError` naming it).
"""

from __future__ import annotations

from typing import Any

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
    ``TypeError`` ..., so code that caught those still does). Each pickles as it was (its message
    and attributes), whatever its ``__init__`` takes: errors cross processes (a worker, Ray).
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self).__new__, (type(self), *self.args), self.__dict__)


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


class OptionTypeError(PuredetokError, TypeError, ValueError):
    """An option or parameter given a value of the wrong type (``skip_special_tokens="false"``,
    ``max_tokens="5"``), naming it: a :class:`TypeError`, and a :class:`ValueError` too, which is
    what such values raised before they were all checked alike.
    """
