"""Reading a ``tokenizers`` decoder config (the JSON under ``"decoder"``) into decoder models.

Only configurations read in full are modelled: an unknown decoder type, or a field this module
does not know for a known type (a newer ``tokenizers`` may add options that change decoding), is
:class:`~puredetok._core.decoders.base.Unmodelled`, never guessed at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from puredetok._core.decoders.base import Decoder, Unmodelled
from puredetok._core.decoders.bpe import BPEDecoder
from puredetok._core.decoders.byte_fallback import ByteFallback
from puredetok._core.decoders.byte_level import ByteLevel
from puredetok._core.decoders.ctc import CTC
from puredetok._core.decoders.fuse import Fuse
from puredetok._core.decoders.metaspace import Metaspace
from puredetok._core.decoders.replace import Replace
from puredetok._core.decoders.strip import Strip
from puredetok._core.decoders.wordpiece import WordPiece

_FIELDS: Mapping[str, frozenset[str]] = {
    "ByteLevel": frozenset({"add_prefix_space", "trim_offsets", "use_regex"}),  # encoding options only
    "ByteFallback": frozenset(),
    "Fuse": frozenset(),
    "Strip": frozenset({"content", "start", "stop"}),
    "Replace": frozenset({"pattern", "content"}),
    "Metaspace": frozenset({"replacement", "add_prefix_space", "prepend_scheme", "split"}),
    "WordPiece": frozenset({"prefix", "cleanup"}),
    "BPEDecoder": frozenset({"suffix"}),
    "CTC": frozenset({"pad_token", "word_delimiter_token", "cleanup"}),
    "Sequence": frozenset({"decoders"}),
}
"""Per decoder type, the fields it may carry besides ``type`` (``split`` only shapes encoding)."""

_SCHEMES = frozenset({"always", "first", "never"})


def _field(config: Mapping[str, Any], key: str, kind: type, default: object = None) -> Any:
    """The field ``key`` (or ``default``), which must be of JSON type ``kind`` (an int: not negative)."""
    value = config.get(key, default)
    if type(value) is not kind or (type(value) is int and value < 0):
        raise Unmodelled(f"{config.get('type')} with a {key} of {value!r}")
    return value


def _replace(config: Mapping[str, Any]) -> list[Decoder]:
    pattern = config.get("pattern")
    if not isinstance(pattern, Mapping) or set(pattern) != {"String"}:
        kinds = ", ".join(pattern) if isinstance(pattern, Mapping) else repr(pattern)
        raise Unmodelled(f"Replace with a {kinds or 'missing'} pattern")
    return [Replace(_field(pattern, "String", str), _field(config, "content", str))]


def _metaspace(config: Mapping[str, Any]) -> list[Decoder]:
    replacement = _field(config, "replacement", str, "\u2581")
    if len(replacement) != 1:
        raise Unmodelled(f"Metaspace with the replacement {replacement!r}")
    scheme = config.get("prepend_scheme")
    if scheme is None:  # configs older than prepend_scheme
        scheme = "always" if _field(config, "add_prefix_space", bool, True) else "never"
    if scheme not in _SCHEMES:
        raise Unmodelled(f"Metaspace with the prepend scheme {scheme!r}")
    return [Metaspace(replacement, str(scheme))]


def _strip(config: Mapping[str, Any]) -> list[Decoder]:
    content = _field(config, "content", str)
    if len(content) != 1:
        raise Unmodelled(f"Strip with the content {content!r}")
    return [Strip(content, _field(config, "start", int), _field(config, "stop", int))]


def _sequence(config: Mapping[str, Any], max_byte_run: int | None) -> list[Decoder]:
    inner = config.get("decoders")
    if not isinstance(inner, list):
        raise Unmodelled(f"Sequence with decoders {inner!r}")
    return [d for sub in inner for d in from_config(sub, max_byte_run=max_byte_run)]


_READERS: Mapping[str, Callable[[Mapping[str, Any]], list[Decoder]]] = {
    "ByteLevel": lambda c: [ByteLevel()],
    "Fuse": lambda c: [Fuse()],
    "Strip": _strip,
    "Replace": _replace,
    "Metaspace": _metaspace,
    "WordPiece": lambda c: [WordPiece(_field(c, "prefix", str, "##"), _field(c, "cleanup", bool, True))],
    "BPEDecoder": lambda c: [BPEDecoder(_field(c, "suffix", str, "</w>"))],
    "CTC": lambda c: [
        CTC(
            _field(c, "pad_token", str, "<pad>"),
            _field(c, "word_delimiter_token", str, "|"),
            _field(c, "cleanup", bool, True),
        )
    ],
}


def from_config(config: Mapping[str, Any], *, max_byte_run: int | None = None) -> list[Decoder]:
    """The decoders a ``tokenizers`` decoder config describes, flattened, in order.

    Raises :class:`Unmodelled` for a decoder (or a field of one) that has no exact streaming model.
    """
    if not isinstance(config, Mapping):
        raise Unmodelled(f"a decoder config that is not an object: {config!r}")
    kind = str(config.get("type"))
    fields = _FIELDS.get(kind)
    if fields is None:
        raise Unmodelled(f"no exact model for the {kind} decoder")
    unknown = sorted(set(config) - fields - {"type"})
    if unknown:
        raise Unmodelled(f"the {kind} decoder has fields puredetok does not know: {', '.join(unknown)}")
    if kind == "Sequence":
        return _sequence(config, max_byte_run)
    if kind == "ByteFallback":
        return [ByteFallback(max_byte_run)]
    return _READERS[kind](config)
