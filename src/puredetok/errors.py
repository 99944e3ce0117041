"""The exceptions puredetok raises."""

from __future__ import annotations

__all__ = [
    "InvalidTokenError",
    "StreamFinishedError",
    "UnsupportedTokenizerError",
    "InvalidStateError",
    "CodecMismatchError",
    "OptionTypeError",
]


class InvalidTokenError(ValueError):
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


class UnsupportedTokenizerError(TypeError):
    """`codec_for` was given an object it cannot read as a tokenizer."""


class StreamFinishedError(ValueError):
    """A token offered to a stream that has already finished (by a stop, its length limit, or abort).

    The stream is untouched; its ``finish_reason`` says why it ended.
    """


class InvalidStateError(ValueError):
    """Bytes that are not a saved state (or stream) a codec can resume: truncated, corrupt, of
    another kind, or holding a value the codec's decoder cannot take. Nothing is changed.
    """


class CodecMismatchError(InvalidStateError):
    """A saved state (or stream) offered to a codec whose fingerprint is not the one it was saved
    with: another tokenizer, or the same one with other decode options.
    """


class OptionTypeError(TypeError, ValueError):
    """An option or parameter given a value of the wrong type (``skip_special_tokens="false"``,
    ``max_tokens="5"``), naming it: a :class:`TypeError`, and a :class:`ValueError` too, which is
    what such values raised before they were all checked alike.
    """
