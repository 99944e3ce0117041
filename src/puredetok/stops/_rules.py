"""The per-request stop options (:class:`StopRules`) and why a stream ended (:class:`FinishReason`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import attrs

from puredetok._core import ADDED, ALL_CLASSES, class_of
from puredetok._options import flag, optional_whole, whole
from puredetok.errors import OptionTypeError
from puredetok.stops._matcher import Matcher, compile_stops


def _stop_strings(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """A lone string is one stop string (as in the OpenAI API), not a collection of characters;
    None (vLLM's and OpenAI's default) is none.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        value = (value,)
    try:
        stops = tuple(value)
    except TypeError:
        raise OptionTypeError(
            f"stop must be a string or a list of strings, got {type(value).__name__}"
        ) from None
    for stop in stops:
        if not isinstance(stop, str):
            raise OptionTypeError(f"stop strings must be str, got {type(stop).__name__} {stop!r}")
        if not stop:
            raise ValueError("stop strings must not be empty")
    return stops


def check_stop_limits(stop: object, max_stops: int, max_stop_chars: int, whose: str = "") -> None:
    """Raises ValueError if the stop strings ``stop`` (a string or a collection of them) are more
    than ``max_stops`` or longer than ``max_stop_chars`` characters together: checked before their
    rules are built, as both the build and the per-token work grow with them. ``whose`` starts
    the error's reason (``"its state has "``, say). Anything that is not stop strings passes
    (:class:`StopRules` names that error).
    """
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, tuple | list):
        return
    if len(stop) > max_stops:
        raise ValueError(
            f"request refused: {whose}{len(stop):,} stop strings > the limit of {max_stops:,} (max_stops)"
        )
    chars = sum(len(one) for one in stop if isinstance(one, str))
    if chars > max_stop_chars:
        raise ValueError(
            f"request refused: {whose}stop strings of {chars:,} characters > the limit of "
            f"{max_stop_chars:,} (max_stop_chars)"
        )


def _token_ids(name: str, value: Iterable[int] | None) -> frozenset[int]:
    """None (vLLM's and OpenAI's default) is no ids."""
    if value is None:
        return frozenset()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise OptionTypeError(f"{name} must be a collection of token ids, got {type(value).__name__}")
    return frozenset(whole(f"each {name} entry", token_id, 0) for token_id in value)


def _stop_token_ids(value: Iterable[int] | None) -> frozenset[int]:
    return _token_ids("stop_token_ids", value)


def _eos_token_ids(value: Iterable[int] | None) -> frozenset[int]:
    return _token_ids("eos_token_ids", value)


def _max_new_tokens(value: int | None) -> int | None:
    return optional_whole("max_new_tokens", value, 1)


def _min_tokens(value: int) -> int:
    return whole("min_tokens", value, 0)


def _flag(instance: Any, attribute: attrs.Attribute[bool], value: object) -> None:
    flag(attribute.name, value)


@attrs.frozen
class StopRules:
    """How a request may stop, named as serving engines name the options. Validated on construction
    (a clear :class:`ValueError` names the bad option; a value of the wrong type, an
    :class:`~puredetok.errors.OptionTypeError`, which is one too); immutable, hashable, shareable.
    ``stop``, ``stop_token_ids`` and ``eos_token_ids`` take None for none (as vLLM and OpenAI-style
    requests send them); ids and token counts are at most ``2**63 - 1`` (the largest int a saved
    stream holds, so that any stream can be handed back).

    ``skip_special_tokens`` is not here: it is an option of the codec
    (``codec_for(tokenizer, skip_special_tokens=...)``), and a stream follows its codec.
    """

    stop: tuple[str, ...] = attrs.field(default=(), converter=_stop_strings)
    """Stop strings (a list is converted to a tuple; a lone string is one stop string)."""
    stop_token_ids: frozenset[int] = attrs.field(default=frozenset(), converter=_stop_token_ids)
    """Token ids that end the stream (the token adds no text)."""
    eos_token_ids: frozenset[int] = attrs.field(default=frozenset(), converter=_eos_token_ids)
    """End-of-sequence ids (see :func:`puredetok.serving._eos.eos_token_ids`); ignored with ``ignore_eos``."""
    ignore_eos: bool = attrs.field(default=False, validator=_flag)
    """Whether EOS ids are ordinary tokens (decoded like any other)."""
    max_new_tokens: int | None = attrs.field(default=None, converter=_max_new_tokens)
    """The stream ends with ``"length"`` after this many generated tokens (None: no limit)."""
    min_tokens: int = attrs.field(default=0, converter=_min_tokens)
    """Nothing stops the stream within the first ``min_tokens`` generated tokens, and their text is
    not searched for stop strings (a stop string may still start in it and end after it)."""
    include_stop_str_in_output: bool = attrs.field(default=False, validator=_flag)
    """Whether the matched stop string (or the stop token's own text) ends the output."""
    matcher: Matcher = attrs.field(init=False, eq=False, repr=False)
    """The stop strings prepared for matching (derived)."""
    ending_ids: frozenset[int] = attrs.field(init=False, eq=False, repr=False)
    """The ids that end the stream: ``stop_token_ids`` plus the EOS ids unless ``ignore_eos`` (derived)."""
    loud: tuple[bool, ...] = attrs.field(init=False, eq=False, repr=False)
    """Per token summary (see :mod:`puredetok._core.classes`), whether a token with it may need
    the stop check (derived): its text shares a class with a stop string's first character, or
    it is an added token while there are ending ids. A token whose summary is not loud is quiet
    (:mod:`puredetok.stops._stream`, rule 3) when every ending id is an added token: its text holds
    no first character of a stop string, and it is no ending id."""

    def __attrs_post_init__(self) -> None:
        if self.max_new_tokens is not None and self.min_tokens > self.max_new_tokens:
            raise ValueError(
                f"min_tokens ({self.min_tokens}) must not exceed max_new_tokens ({self.max_new_tokens})"
            )
        ending = self.stop_token_ids if self.ignore_eos else self.stop_token_ids | self.eos_token_ids
        object.__setattr__(self, "matcher", compile_stops(self.stop))
        object.__setattr__(self, "ending_ids", ending)
        openers = class_of("".join(stop[0] for stop in self.stop)) | (ADDED if ending else 0)
        object.__setattr__(self, "loud", tuple(bool(bits & openers) for bits in range(ALL_CLASSES)))


@attrs.frozen
class FinishReason:
    """Why a stream ended: ``"stop"`` (with the stop string, or the stop/EOS token id, that matched),
    ``"length"`` (its token limit, or closed without a stop) or ``"abort"``.
    """

    kind: Literal["stop", "length", "abort"] = attrs.field(
        validator=attrs.validators.in_(("stop", "length", "abort"))
    )
    matched: str | int | None = None
    """The stop string or token id that ended the stream (``None`` unless ``kind == "stop"``)."""
