"""What the layers above the core (the stop layer, the managers) are tested on: every real tokenizer
the tests carry, and the codecs no real tokenizer there gets by default, the ``spaces`` family (no
decoder: tokens joined with spaces) and the generic fallback, both forced (``window=True``) and
where a tokenizer really falls back (a class that overrides ``decode``, a decoder with no exact
model).

A :class:`Source` gives a layer property what it needs: the codec for each ``skip_special_tokens``,
the tokenizer's own decode (the oracle), ids to draw, an EOS id, and what a
:class:`~puredetok.serving._detokenize_manager.DetokenizeManager` is built from (with the codecs it
must use).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import attrs
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerFast

import helpers
import puredetok
import synthetic
from puredetok._build import read_vocabulary
from puredetok._core import continuation_text
from puredetok.serving._codec_cache import CodecCache
from puredetok.serving._detokenize_manager import DetokenizeManager


@attrs.frozen(eq=False)
class Source:
    """A tokenizer as the layer properties see it."""

    label: str
    tokenizer: Any
    """What a manager is built from."""
    codec: Callable[[bool], puredetok.Codec]
    """The codec for ``skip_special_tokens``."""
    decode: Callable[[Sequence[int], bool], str]
    """``tokenizer.decode(ids, skip_special_tokens=...)``: the oracle."""
    ids: Callable[[int], st.SearchStrategy[list[int]]]
    """Ids to draw, at most this many."""
    eos: int
    """An id that ends generation."""
    encode: Callable[[str], list[int]]
    """The tokenizer's ids for a text (no special tokens added)."""
    window: bool = False
    """Whether the manager must be handed the fallback codecs (``codec_for(..., window=True)``)."""

    def continuation(self, prompt: Sequence[int], output: Sequence[int], skip: bool = False) -> str:
        """Contract C's text from the decode alone (``decode(p + s)`` after what it shares with
        ``decode(p)``)."""
        return continuation_text(self.decode(prompt, skip), self.decode([*prompt, *output], skip))

    def manager(self, **options: Any) -> DetokenizeManager:
        """A fresh manager of this tokenizer, sharing its codecs and its vocabulary (read once: 0.1 -
        0.3 s a read on the larger vocabularies) with every other one built here."""
        return DetokenizeManager(
            self.tokenizer, codecs=_codecs(self.label), vocabulary=vocabulary_of(self.label), **options
        )


def real(name: str) -> Source:
    """A real tokenizer of tests/data (helpers.TOKENIZERS)."""
    return _real(name, False)


def forced_window(name: str) -> Source:
    """A real tokenizer with the generic fallback codec forced on (``window=True``)."""
    return _real(name, True)


@functools.cache
def _real(name: str, window: bool) -> Source:
    tok = helpers.tokenizer(name)

    def codec(skip: bool) -> puredetok.Codec:
        if window:
            return _window(name, skip)
        return helpers.codec(name, skip)

    return Source(
        f"window:{name}" if window else name,
        tok,
        codec,
        lambda ids, skip: helpers.reference(name, ids, skip),
        lambda size: helpers.id_lists(name, max_size=size),
        tok.eos_token_id if tok.eos_token_id is not None else 0,
        lambda text: list(tok.encode(text, add_special_tokens=False)),
        window,
    )


@functools.cache
def _window(name: str, skip: bool) -> puredetok.Codec:
    return puredetok.codec_for(helpers.tokenizer(name), skip_special_tokens=skip, window=True)


@functools.cache
def spaces() -> Source:
    """A ``tokenizers.Tokenizer`` with no decoder (the ``spaces`` family), with specials and added
    tokens (tests/synthetic.py)."""
    return _raw("spaces", synthetic.no_decoder())


@functools.cache
def unmodelled_decoder() -> Source:
    """A ``tokenizers.Tokenizer`` whose decoder has no exact model (a regex Replace, then Fuse):
    ``codec_for`` falls back on its own."""
    return _raw("fallback:regex_replace", synthetic.unmodelled_regex())


def _raw(label: str, tok: Any) -> Source:
    size = max(tok.get_vocab(with_added_tokens=True).values()) + 1
    codecs = {skip: puredetok.codec_for(tok, skip_special_tokens=skip) for skip in (False, True)}
    return Source(
        label,
        tok,
        codecs.__getitem__,
        lambda ids, skip: str(tok.decode(list(ids), skip_special_tokens=skip)),
        lambda most: st.lists(st.integers(0, size - 1), max_size=most),
        tok.token_to_id("<|end|>"),
        lambda text: list(tok.encode(text, add_special_tokens=False).ids),
    )


class OverridingDecode(PreTrainedTokenizerFast):  # type: ignore[misc]
    """A ``transformers`` class that overrides ``decode`` (faithfully: it calls the base class's),
    which ``codec_for`` must not treat as a known one: it falls back."""

    def decode(self, *args: Any, **kwargs: Any) -> Any:
        """``PreTrainedTokenizerFast.decode``, as a subclass would wrap it."""
        return PreTrainedTokenizerFast.decode(self, *args, **kwargs)


@functools.cache
def overriding_decode(name: str) -> Source:
    """A real tokenizer's backend in :class:`OverridingDecode` (module-level, so that a stream of
    its fallback codec, which decodes with it, can be pickled)."""
    base = helpers.tokenizer(name)
    backend = base.backend_tokenizer
    tok = OverridingDecode(tokenizer_object=backend.from_str(backend.to_str()), eos_token=base.eos_token)
    codecs = {skip: puredetok.codec_for(tok, skip_special_tokens=skip) for skip in (False, True)}
    return Source(
        f"override:{name}",
        tok,
        codecs.__getitem__,
        lambda ids, skip: str(tok.decode(list(ids), skip_special_tokens=skip)),
        lambda size: helpers.id_lists(name, max_size=size),
        tok.eos_token_id,
        lambda text: list(tok.encode(text, add_special_tokens=False)),
    )


FALLBACKS: dict[str, Callable[[], Source]] = {
    "window:qwen3": lambda: forced_window("qwen3"),
    "window:llama2": lambda: forced_window("llama2"),
    "override:gpt2": lambda: overriding_decode("gpt2"),
    "fallback:regex_replace": unmodelled_decoder,
}
"""Sources whose codecs are the generic fallback (``codec.exact is False``)."""

EXTRA: dict[str, Callable[[], Source]] = {"spaces": spaces, **FALLBACKS}
"""The sources beyond the real tokenizers' own codecs."""


def source(label: str) -> Source:
    """A source by its label: a real tokenizer's name, or one of :data:`EXTRA`."""
    return EXTRA[label]() if label in EXTRA else real(label)


@functools.cache
def vocabulary_of(label: str) -> dict[str, int] | None:
    """``read_vocabulary`` of a source's tokenizer, read once per test session: what its managers
    are handed (``DetokenizeManager(..., vocabulary=...)``)."""
    return read_vocabulary(source(label).tokenizer)


@functools.cache
def _codecs(label: str) -> CodecCache:
    """The codecs every manager of a source shares; for a forced fallback, a cache that builds the
    window codecs (``codec_for(..., window=True)``)."""
    if source(label).window:
        return CodecCache(64, build=functools.partial(puredetok.codec_for, window=True))
    return CodecCache(64)
