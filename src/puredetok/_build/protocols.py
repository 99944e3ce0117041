"""What puredetok asks of a tokenizer, as a typing :class:`~typing.Protocol` (no imports of the core)."""

from __future__ import annotations

from typing import Protocol


class TokenizerLike(Protocol):
    """A tokenizer puredetok can model: an object that decodes a list of ids.

    The type asks for as little as every tokenizer :func:`puredetok.codec_for` reads has in
    common, in every release of the dependency ranges: ``transformers``' tokenizers (whose
    ``decode`` is typed to return ``str | list[str]``, a list for a batch),
    ``tokenizers.Tokenizer``, mistral-common's ``MistralTokenizer``, ``Tekkenizer`` and
    ``SentencePieceTokenizer``, ``transformers``' ``MistralCommonBackend``, the engines' wrappers of
    them, ``tiktoken.Encoding``, and a class of one's own. What :func:`puredetok.codec_for`
    actually reads is checked when it runs (an object it cannot read gets
    :class:`~puredetok.UnsupportedTokenizerError` naming what is missing):

    * the ``tokenizers`` backend: the object itself if it is a ``tokenizers.Tokenizer``, else its
      ``backend_tokenizer`` attribute. From it, once: the vocabulary with added tokens, which added
      tokens are special, the decoder's JSON configuration, and the model type (for the BPE
      exception of ``transformers``' space cleanup). With a backend whose decoder is modelled, the
      codec is exact and streaming never calls the tokenizer again.
    * mistral-common's objects, the wrappers of one and ``tiktoken.Encoding``: their own tables.
    * optional attributes, through ``getattr``: ``name_or_path`` (for messages),
      ``clean_up_tokenization_spaces`` (the default of ``decode``), and whether the class or object
      overrides how it decodes (then the codec is the generic fallback, which calls ``decode``,
      unless the class is one puredetok models: ByT5, Whisper, CLIP, wav2vec2's CTC, Marian).
    * ``decode`` itself, once, to check an exact model before the codec claims exactness.
    * without any of those: ``decode(ids, skip_special_tokens=..., clean_up_tokenization_spaces=...)``
      (as ``transformers``' takes them), ``get_vocab()`` (token to id) and ``len()``, for the
      generic fallback codec.
    """

    def decode(self, ids: list[int], /) -> str | list[str]:
        """The text of ``ids`` (the oracle of guarantee G1)."""
        ...
