"""What puredetok asks of a tokenizer, as a typing :class:`~typing.Protocol` (no imports of the core)."""

from __future__ import annotations

__all__ = ["TokenizerLike"]

from typing import Protocol


class TokenizerLike(Protocol):
    """A tokenizer puredetok can model: it decodes ids and has a vocabulary.

    ``transformers`` tokenizers and ``tokenizers.Tokenizer`` both satisfy it. What
    :func:`puredetok.codec_for` actually reads:

    * the ``tokenizers`` backend: the object itself if it is a ``tokenizers.Tokenizer``, else its
      ``backend_tokenizer`` attribute. From it, once: the vocabulary with added tokens, which added
      tokens are special, the decoder's JSON configuration, and the model type (for the BPE
      exception of ``transformers``' space cleanup). With a backend whose decoder is modelled, the
      codec is exact and streaming never calls the tokenizer again.
    * optional attributes, through ``getattr``: ``name_or_path`` (for messages),
      ``clean_up_tokenization_spaces`` (the default of ``decode``), and whether the class or object
      overrides how it decodes (then the codec is the generic fallback, which calls ``decode``,
      unless the class is one puredetok models: ByT5, Whisper, CLIP, wav2vec2's CTC, Marian).
    * ``decode`` itself, once, to check an exact model before the codec claims exactness.
    * without a backend: ``decode`` (which then also gets ``clean_up_tokenization_spaces``, as
      ``transformers``' does), ``get_vocab()`` and ``len()``, for the generic fallback codec.
    """

    def decode(self, ids: list[int], /, *, skip_special_tokens: bool = ...) -> str:
        """The text of ``ids`` (the oracle of guarantee G1)."""
        ...

    def get_vocab(self) -> dict[str, int]:
        """Token string to id, added tokens included."""
        ...
