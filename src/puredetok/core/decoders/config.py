"""Reading a ``tokenizers`` decoder config (the JSON under ``"decoder"``) into decoder models."""

from __future__ import annotations

__all__ = ["from_config"]

from collections.abc import Callable, Mapping
from typing import Any

from puredetok.core.decoders.base import Decoder, Unmodelled
from puredetok.core.decoders.byte_fallback import ByteFallback
from puredetok.core.decoders.byte_level import ByteLevel
from puredetok.core.decoders.fuse import Fuse
from puredetok.core.decoders.metaspace import Metaspace
from puredetok.core.decoders.replace import Replace
from puredetok.core.decoders.strip import Strip
from puredetok.core.decoders.wordpiece import WordPiece


def _replace(config: Mapping[str, Any]) -> list[Decoder]:
    pattern = config.get("pattern", {})
    if "String" not in pattern:
        raise Unmodelled(f"Replace with a {', '.join(pattern) or 'missing'} pattern")
    return [Replace(str(pattern["String"]), str(config["content"]))]


def _metaspace(config: Mapping[str, Any]) -> list[Decoder]:
    scheme = config.get("prepend_scheme")
    if scheme is None:  # configs older than prepend_scheme
        scheme = "always" if config.get("add_prefix_space", True) else "never"
    return [Metaspace(str(config.get("replacement", "\u2581")), str(scheme))]


def _sequence(config: Mapping[str, Any], max_byte_run: int | None) -> list[Decoder]:
    return [d for sub in config.get("decoders", []) for d in from_config(sub, max_byte_run=max_byte_run)]


_READERS: Mapping[str, Callable[[Mapping[str, Any]], list[Decoder]]] = {
    "ByteLevel": lambda c: [ByteLevel()],
    "Fuse": lambda c: [Fuse()],
    "Strip": lambda c: [Strip(str(c["content"]), int(c["start"]), int(c["stop"]))],
    "Replace": _replace,
    "Metaspace": _metaspace,
    "WordPiece": lambda c: [WordPiece(str(c.get("prefix", "##")), bool(c.get("cleanup", True)))],
}


def from_config(config: Mapping[str, Any], *, max_byte_run: int | None = None) -> list[Decoder]:
    """The decoders a ``tokenizers`` decoder config describes, flattened, in order.

    Raises :class:`Unmodelled` for a decoder that has no exact streaming model.
    """
    kind = str(config.get("type"))
    if kind == "Sequence":
        return _sequence(config, max_byte_run)
    if kind == "ByteFallback":
        return [ByteFallback(max_byte_run)]
    reader = _READERS.get(kind)
    if reader is None:
        raise Unmodelled(f"no exact model for the {kind} decoder")
    return reader(config)
