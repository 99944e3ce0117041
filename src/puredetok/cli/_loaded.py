"""Saying what a command loaded (docs/audit.md, docs/trace.md, docs/worker.md): the tokenizer
(its path, or the embedded Qwen3), what chose it, its decoder family and whether its codec is
exact, where the user sees it.

A forgotten ``--tokenizer`` was silent: every command fell back to the embedded Qwen3, and an
audit of a Llama-2 log with it reported every request as differing.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from puredetok._core import Codec
from puredetok.serving._loading import DEFAULT_TOKENIZER, LoadedTokenizer, TokenizerLoadError, load_tokenizer

DEFAULT_NAME = "embedded Qwen3"
"""How the tokenizer embedded in the package is named."""

FAMILIES = {
    "byte_level": "byte-level BPE",
    "sentencepiece": "SentencePiece byte-fallback",
    "metaspace": "Metaspace (SentencePiece)",
    "wordpiece": "WordPiece",
    "spaces": "tokens joined with spaces",
    "byt5": "ByT5 bytes",
    "whisper": "Whisper byte-level BPE",
    "clip": "CLIP BPE",
    "ctc": "CTC (Wav2Vec2)",
    "marian": "Marian SentencePiece",
    "tekken": "Tekken byte-level BPE (mistral-common)",
    "mistral_sentencepiece": "SentencePiece (mistral-common)",
    "tiktoken": "tiktoken byte-level BPE",
    "window": "not modelled (the generic fallback)",
}
"""The decoder families in words, by the codec's :attr:`~puredetok.Codec.family`."""


def family_name(codec: Codec) -> str:
    """The decoder family of ``codec`` in words, as its decoding model names it
    (:attr:`~puredetok.Codec.family`): a chain of ``tokenizers`` decoders that is no family of
    :data:`FAMILIES` is named by its decoders.
    """
    return FAMILIES.get(codec.family, f"decoders {codec.family}")


@attrs.frozen
class Loaded:
    """What a command loaded: the tokenizer, what chose it, and its codec's family and exactness."""

    name: str
    """Its path as given, or :data:`DEFAULT_NAME`."""
    chosen_by: str
    """``"--tokenizer"``, ``"the trace"`` (its header), or ``"default"`` (nothing named one)."""
    family: str
    """:func:`family_name` of its codec."""
    codec_family: str
    """The codec's own :attr:`~puredetok.Codec.family`."""
    exact: bool
    reason: str
    """How its codec models the decoder, or why not exactly."""
    vocab_size: int
    """Its ids are ``0 <= id < vocab_size``."""

    def __str__(self) -> str:
        exactness = "exact" if self.exact else f"not exact: {self.reason}"
        return f"{self.name} ({self.family}, {exactness})"

    @property
    def line(self) -> str:
        """The tokenizer, its family and exactness, and what chose it, on one line."""
        if self.chosen_by == "default":
            return f"{self}, the default (--tokenizer PATH chooses another)"
        if self.chosen_by == "the trace":
            return f"{self}, named by the trace"
        return str(self)

    def to_json(self) -> dict[str, Any]:
        """The same facts as a JSON object."""
        return attrs.asdict(self)


def loaded(name: str | os.PathLike[str] | None, chosen_by: str, codec: Codec) -> Loaded:
    """What was loaded: the tokenizer ``name`` (None: the embedded one), its ``codec``."""
    shown = DEFAULT_NAME if name is None or str(name) == DEFAULT_TOKENIZER else str(name)
    return Loaded(
        shown, chosen_by, family_name(codec), codec.family, codec.exact, codec.reason, codec.vocab_size
    )


def load(name: str | os.PathLike[str] | None) -> LoadedTokenizer:
    """:func:`~puredetok.serving._loading.load_tokenizer`, its error saying that a model id is not
    looked up (the commands load offline, from a folder).
    """
    try:
        return load_tokenizer(name)
    except TokenizerLoadError as error:
        text = str(name)
        if (
            name is not None
            and not os.path.exists(text)
            and text.count("/") == 1
            and not text.startswith(".")
        ):
            raise TokenizerLoadError(
                f"{error} (a model id such as {text!r} is not looked up: puredetok reads tokenizers "
                "offline, from a folder)"
            ) from None
        raise
