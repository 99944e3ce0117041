"""``codec_for``: read a tokenizer once and build its immutable :class:`Codec`.

This is the only part of the core that looks at a tokenizer object; everything it needs (the
vocabulary, which ids are special, the decoder configuration, the cleanup rule) is copied into
plain tables, so streaming never calls the tokenizer (except in the generic fallback).
"""

from __future__ import annotations

__all__ = ["codec_for"]

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import tokenizers

from puredetok.core.chain import compile_chain
from puredetok.core.codec import OUT_OF_VOCAB, Codec, OutOfVocab
from puredetok.core.decoders import Unmodelled, from_config
from puredetok.core.decoders.base import Decoder, Stage
from puredetok.core.decoders.cleanup import cleanup_stages
from puredetok.core.decoders.spaces import JoinWithSpaces
from puredetok.core.out_of_vocab import ignoring_out_of_vocab
from puredetok.core.protocols import TokenizerLike
from puredetok.core.window import Window
from puredetok.errors import UnsupportedTokenizerError

# transformers classes whose decode override adds only options that are off by default.
_HARMLESS_DECODE_OVERRIDES = frozenset({"CodeGenTokenizer"})

_FAMILIES = {
    "ByteLevel": "byte_level",
    "Replace+ByteFallback+Fuse+Strip": "sentencepiece",
    "Metaspace": "metaspace",
    "WordPiece": "wordpiece",
    "JoinWithSpaces": "spaces",
}


def _backend_of(tokenizer: object) -> tokenizers.Tokenizer | None:
    if isinstance(tokenizer, tokenizers.Tokenizer):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend if isinstance(backend, tokenizers.Tokenizer) else None


def _decode_override(tokenizer: object) -> str | None:
    """The name of a transformers method that changes what decode does, if the class has one."""
    try:
        from transformers import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:  # pragma: no cover - transformers is a dependency
        return None
    cls = type(tokenizer)
    if cls.__name__ in _HARMLESS_DECODE_OVERRIDES:
        return None
    for name, base in (("decode", PreTrainedTokenizerBase), ("_decode", TokenizersBackend)):
        if getattr(cls, name, None) is not getattr(base, name, None):
            return name
    return None


def _resolve_cleanup(tokenizer: object, backend: tokenizers.Tokenizer, requested: bool | None) -> bool:
    """What ``tokenizer.decode`` does about cleanup, with transformers' BPE exception applied."""
    if isinstance(tokenizer, tokenizers.Tokenizer):
        return bool(requested)
    flag = (
        requested
        if requested is not None
        else bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))
    )
    if not flag:
        return False
    forced = bool(
        getattr(tokenizer, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False)
    )
    return not (type(backend.model).__name__ == "BPE" and not forced)


def _vocabulary(backend: tokenizers.Tokenizer, skip_special_tokens: bool) -> list[str | None]:
    """Per id, the token string the decoders receive; None where the decode drops the id."""
    by_token = backend.get_vocab(with_added_tokens=True)
    size = max(by_token.values(), default=-1) + 1
    tokens: list[str | None] = [None] * size
    for token, token_id in by_token.items():
        tokens[token_id] = token
    # The crate looks ids up in the added vocabulary first, then the model.
    for token_id, added in backend.get_added_tokens_decoder().items():
        if token_id < size:
            tokens[token_id] = added.content
    if skip_special_tokens:
        # The crate skips by content: any id whose token is a special token's content.
        special = {added.content for added in backend.get_added_tokens_decoder().values() if added.special}
        tokens = [None if token in special else token for token in tokens]
    return tokens


def _added_ids(tokenizer: Any, backend: tokenizers.Tokenizer | None) -> frozenset[int]:
    if backend is not None:
        return frozenset(backend.get_added_tokens_decoder())
    return frozenset(getattr(tokenizer, "all_special_ids", ()))


def _decoders(backend: tokenizers.Tokenizer, max_byte_run: int | None) -> list[Decoder]:
    if backend.decoder is None:
        return [JoinWithSpaces()]
    config = json.loads(backend.decoder.__getstate__())
    return from_config(config, max_byte_run=max_byte_run)


def _fingerprint(*parts: object) -> str:
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, list):
            digest.update(
                "\x1f".join("\x1e" if t is None else t for t in part).encode("utf-8", "surrogatepass")
            )
        else:
            digest.update(repr(part).encode())
        digest.update(b"\x1d")
    return digest.hexdigest()[:32]


def _reference_decode(
    tokenizer: Any, skip: bool, cleanup: bool | None, spaces: bool | None = None
) -> Callable[[list[int]], str]:
    if isinstance(tokenizer, tokenizers.Tokenizer):
        return functools.partial(tokenizer.decode, skip_special_tokens=skip)
    options: dict[str, Any] = {"skip_special_tokens": skip, "clean_up_tokenization_spaces": cleanup}
    if spaces is not None:
        options["spaces_between_special_tokens"] = spaces
    return functools.partial(tokenizer.decode, **options)


def _silent_ids(
    decode: Callable[[list[int]], str], size: int, backend: tokenizers.Tokenizer | None, skip: bool
) -> frozenset[int]:
    """Ids that change nothing wherever they stand (dropped specials, holes in the vocabulary).

    An id qualifies if it decodes to "" alone and three times over, and is invisible between,
    before and after a few probe ids (CTC's pad token, for one, is not: it separates repeats).
    """

    def batch(sequences: list[list[int]]) -> list[str]:
        if backend is not None:
            return list(backend.decode_batch(sequences, skip_special_tokens=skip))
        return [decode(sequence) for sequence in sequences]

    ids = list(range(size))
    alone = batch([[i] for i in ids])
    candidates = [i for i, text in zip(ids, alone) if text == ""]
    thrice = batch([[i, i, i] for i in candidates])
    candidates = [i for i, text in zip(candidates, thrice) if text == ""]
    probes = [i for i, text in zip(ids, alone) if text][:: max(1, size // 7)][:8]
    for probe in probes:
        expected = batch([[probe, probe]])[0]
        around = batch([[probe, i, probe] for i in candidates])
        candidates = [i for i, text in zip(candidates, around) if text == expected]
    return frozenset(candidates)


def _window_codec(
    tokenizer: Any,
    backend: tokenizers.Tokenizer | None,
    reason: str,
    skip: bool,
    cleanup: bool | None,
    effective_cleanup: bool,
    name: str,
    spaces: bool | None = None,
) -> Codec:
    decode = _reference_decode(tokenizer, skip, cleanup, spaces)
    if backend is not None:
        size = max(backend.get_vocab(with_added_tokens=True).values(), default=-1) + 1
        vocab_part: object = _vocabulary(backend, skip)
    else:
        size = len(tokenizer)
        vocab_part = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    window = Window(decode=decode, silent=_silent_ids(decode, size, backend, skip))
    return Codec(
        family="window",
        exact=False,
        reason=reason,
        vocab_size=size,
        skip_special_tokens=skip,
        clean_up_tokenization_spaces=effective_cleanup,
        fingerprint=_fingerprint(
            "window", type(tokenizer).__name__, vocab_part, skip, cleanup, reason, spaces
        ),
        name=name,
        decoding=window,
        added_ids=_added_ids(tokenizer, backend),
    )


def codec_for(
    tokenizer: TokenizerLike,
    *,
    skip_special_tokens: bool = False,
    clean_up_tokenization_spaces: bool | None = None,
    max_byte_run: int | None = None,
    out_of_vocab: OutOfVocab = "raise",
    window: bool = False,
    spaces_between_special_tokens: bool | None = None,
) -> Codec:
    """Build the codec of a ``transformers`` tokenizer or a ``tokenizers.Tokenizer``.

    ``clean_up_tokenization_spaces=None`` means whatever ``tokenizer.decode`` does by default.
    ``max_byte_run`` caps how many byte-fallback tokens a still-valid run may hold (None: no cap,
    always exact; with a cap, exact unless a valid run longer than the cap later turns invalid).
    ``out_of_vocab`` says what an id in ``[vocab_size, 2**32)`` does: ``"raise"``
    (:class:`~puredetok.InvalidTokenError`) or ``"ignore"`` (it decodes to nothing, exactly as
    ``tokenizer.decode`` skips it; ``ValueError`` if this tokenizer's decode does not).
    ``window=True`` builds the generic window codec even when an exact model exists (to compare).
    ``spaces_between_special_tokens`` is passed to ``tokenizer.decode`` where it could matter
    (None: not passed): transformers' own decode ignores it, and so does every exact model here;
    only classes that decode in Python (the generic codec) can act on it (Wav2Vec2's CTC classes
    do). A ``tokenizers.Tokenizer`` has no such option.

    The codec is exact when the tokenizer's decoder is one puredetok models; otherwise it is the
    generic window codec (``codec.exact is False``, ``codec.reason`` says why).
    Raises :class:`UnsupportedTokenizerError` for an object that is not a tokenizer.
    """
    if max_byte_run is not None and (type(max_byte_run) is not int or max_byte_run < 1):
        raise ValueError(f"max_byte_run must be a positive int or None, not {max_byte_run!r}")
    if out_of_vocab not in OUT_OF_VOCAB:
        raise ValueError(f"out_of_vocab must be 'raise' or 'ignore', not {out_of_vocab!r}")
    codec = _codec(
        tokenizer,
        skip_special_tokens,
        clean_up_tokenization_spaces,
        max_byte_run,
        window,
        spaces_between_special_tokens,
    )
    return ignoring_out_of_vocab(codec, tokenizer) if out_of_vocab == "ignore" else codec


def _codec(
    tokenizer: TokenizerLike,
    skip_special_tokens: bool,
    clean_up_tokenization_spaces: bool | None,
    max_byte_run: int | None,
    window: bool,
    spaces_between_special_tokens: bool | None,
) -> Codec:
    name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    backend = _backend_of(tokenizer)
    skip = bool(skip_special_tokens)
    if backend is None:
        if callable(getattr(tokenizer, "decode", None)) and callable(getattr(tokenizer, "get_vocab", None)):
            return _window_codec(
                tokenizer,
                None,
                "no tokenizers backend to read the decoder from",
                skip,
                clean_up_tokenization_spaces,
                bool(clean_up_tokenization_spaces),
                name,
                spaces_between_special_tokens,
            )
        raise UnsupportedTokenizerError(
            f"cannot build a codec for a {type(tokenizer).__name__}: expected a transformers tokenizer "
            "or a tokenizers.Tokenizer"
        )
    cleanup = _resolve_cleanup(tokenizer, backend, clean_up_tokenization_spaces)
    if window:
        return _window_codec(
            tokenizer,
            backend,
            "the generic window codec was asked for",
            skip,
            clean_up_tokenization_spaces,
            cleanup,
            name,
            spaces_between_special_tokens,
        )
    override = _decode_override(tokenizer) if not isinstance(tokenizer, tokenizers.Tokenizer) else None
    if override is not None:
        return _window_codec(
            tokenizer,
            backend,
            f"{type(tokenizer).__name__} overrides {override}",
            skip,
            clean_up_tokenization_spaces,
            cleanup,
            name,
            spaces_between_special_tokens,
        )
    tokens = _vocabulary(backend, skip)
    try:
        decoders = _decoders(backend, max_byte_run)
        tail: Sequence[Stage] = cleanup_stages() if cleanup else ()
        chain = compile_chain(decoders, tokens, tail)
    except Unmodelled as error:
        return _window_codec(
            tokenizer,
            backend,
            str(error),
            skip,
            clean_up_tokenization_spaces,
            cleanup,
            name,
            spaces_between_special_tokens,
        )
    names = "+".join(type(d).__name__ for d in decoders)
    family = _FAMILIES.get(names, names)
    description = names + (" + cleanup" if cleanup else "")
    return Codec(
        family=family,
        exact=True,
        reason=f"exact model: {description}",
        vocab_size=len(tokens),
        skip_special_tokens=skip,
        clean_up_tokenization_spaces=cleanup,
        fingerprint=_fingerprint(description, max_byte_run, skip, tokens),
        name=name,
        decoding=chain,
        added_ids=_added_ids(tokenizer, backend),
    )
