"""The exact model of a ``tokenizers.Tokenizer``'s own decode: its vocabulary, read in full, and its
decoder configuration as a list of decoder models (:mod:`puredetok._core.decoders`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from puredetok._build.config import from_config
from puredetok._core.decoders import Unmodelled
from puredetok._core.decoders.base import Decoder
from puredetok._core.decoders.bpe import BPEDecoder
from puredetok._core.decoders.spaces import JoinWithSpaces
from puredetok._core.decoders.wordpiece import WordPiece
from puredetok._build.reading import vocabulary

if TYPE_CHECKING:
    import tokenizers

_MODELS = frozenset({"BPE", "WordPiece", "WordLevel", "Unigram"})


@attrs.frozen(eq=False)
class BackendParts:
    """What a backend's decode is made of."""

    tokens: list[str | None]
    """Per id, the token the decoders receive (None: dropped)."""
    decoders: list[Decoder]
    names: str
    """The decoders' names joined with ``+``."""


def _check_model_options(
    backend: tokenizers.Tokenizer, decoders: Sequence[Decoder], suffix_undone: bool
) -> None:
    """A model option that spells tokens differently must be undone by the decoder chain (or, with
    ``suffix_undone``, by the class around it).
    """
    kind = type(backend.model).__name__
    if kind not in _MODELS:
        raise Unmodelled(f"a {kind} model")
    if kind != "BPE":
        return
    suffix = getattr(backend.model, "end_of_word_suffix", None) or ""
    if (
        suffix
        and not suffix_undone
        and not any(isinstance(d, BPEDecoder) and d.suffix == suffix for d in decoders)
    ):
        raise Unmodelled(f"the BPE model's end_of_word_suffix {suffix!r}, which its decoder does not undo")
    prefix = getattr(backend.model, "continuing_subword_prefix", None) or ""
    if prefix and not any(isinstance(d, WordPiece) and d.prefix == prefix for d in decoders):
        raise Unmodelled(
            f"the BPE model's continuing_subword_prefix {prefix!r}, which its decoder does not undo"
        )


def backend_parts(
    backend: tokenizers.Tokenizer,
    skip: bool,
    max_byte_run: int | None,
    *,
    suffix_undone: bool = False,
    by_token: dict[str, int] | None = None,
) -> BackendParts:
    """Read the backend; raises :class:`Unmodelled` for anything not read in full. ``by_token`` is
    the backend's vocabulary with added tokens, if the caller already has it.
    """
    if backend.decoder is None:
        decoders: list[Decoder] = [JoinWithSpaces()]
    else:
        try:
            state = backend.decoder.__getstate__()
        except Exception as error:  # a custom (Python) decoder: tokenizers cannot serialize it
            raise Unmodelled(f"a decoder that cannot be read ({error})") from error
        decoders = from_config(json.loads(state), max_byte_run=max_byte_run)
    _check_model_options(backend, decoders, suffix_undone)
    # An empty Sequence joins the tokens as they are: named so that the codec's reason says so.
    names = "+".join(type(d).__name__ for d in decoders) or "Sequence([])"
    return BackendParts(vocabulary(backend, skip, by_token), decoders, names)
