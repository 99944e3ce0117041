"""``codec_for``: read a tokenizer once and build its immutable :class:`Codec`.

This is the only part of the core that looks at a tokenizer object. It

1. reads what decides decoding: the ``tokenizers`` backend's vocabulary, special tokens and decoder
   configuration, or, for the ``transformers`` classes that decode in Python, that class's own
   tables (:mod:`puredetok._build.pyclasses`);
2. builds an exact streaming model of it, if it recognises every part of the configuration (an
   unknown decoder or field, a model option that the decoder does not undo, or a class or object
   that overrides how decoding works is never treated as a known one);
3. checks that model against ``tokenizer.decode`` itself (:mod:`puredetok._build.verify`) before it
   claims exactness;
4. and otherwise builds the generic fallback (:mod:`puredetok._build.window`), which says why.

Everything the exact model needs is copied into plain tables, so streaming never calls the
tokenizer; the fallback calls its ``decode``.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs

from puredetok._build.backend_model import backend_parts
from puredetok._build.compile import compile_chain
from puredetok._core.chain import Chain
from puredetok._core.codec import OUT_OF_VOCAB, Codec, OutOfVocab
from puredetok._core.decoders import Unmodelled
from puredetok._core.decoders.base import Stage
from puredetok._core.decoders.byte_fallback import ByteFallbackStage, byte_token_value
from puredetok._core.decoders.cleanup import TRANSFORMERS_RULES, apply_rules, cleanup_stages
from puredetok._build.out_of_vocab import ignoring_fingerprint, ignoring_out_of_vocab
from puredetok._build.protocols import TokenizerLike
from puredetok._build.pyclasses import ClassModel, harmless_reference, model_for_class
from puredetok._build.pyclasses.mistral import Native, read_native, unreadable
from puredetok._build.reading import backend_of, is_backend, override, vocabulary
from puredetok._build.verify import Oracle, check_model, fast_path_disagreement, mark_probes
from puredetok._build.window import build_window, decode_or_none
from puredetok._options import choice, flag, optional_flag, optional_whole
from puredetok.errors import UnsupportedTokenizerError

if TYPE_CHECKING:
    import tokenizers

MAX_VOCAB = 1 << 24
"""The largest vocabulary (largest id + 1) a codec is built for: 16,777,216. A codec holds
per-id tables as long as that (the largest released vocabularies are about 260,000 ids); a
tokenizer with a larger id gets a clear error at build instead of exhausting memory."""


_FAMILIES = {
    "ByteLevel": "byte_level",
    "Replace+ByteFallback+Fuse+Strip": "sentencepiece",
    "Metaspace": "metaspace",
    "WordPiece": "wordpiece",
    "JoinWithSpaces": "spaces",
}

_CHECK_TEXT = (
    "推理引擎 😀 streams text: naïve café, 1+1=2.\n第二行结束。 日本語のテキスト、한국어 텍스트 ภาษาไทย"
    " Ελληνικά Русский 🏳️‍🌈👍🏽 ┌──┐ it's don't . <|0.50|> a photo"
)
"""Text whose ids the check decodes in short slices (split characters, byte runs, cleanup)."""


_DECODE_CHUNK = 8_192
"""Sequences per call of the crate's ``decode_batch``, which holds the interpreter's lock throughout:
a codec built in a thread then lets the others run between two calls."""


@attrs.frozen(eq=False)
class _Source:
    """What ``codec_for`` read from the tokenizer object, once."""

    tokenizer: Any
    backend: tokenizers.Tokenizer | None
    name: str
    skip: bool
    cleanup_request: bool | None
    cleanup: bool
    """Whether ``transformers``' space cleanup applies (its BPE exception resolved)."""
    size: int
    added: frozenset[int]
    by_token: dict[str, int] | None
    """The backend's vocabulary with added tokens (read once)."""
    spaces: bool | None
    """``spaces_between_special_tokens`` for ``tokenizer.decode`` (None: not passed)."""
    native: Native | None = None
    """A tokenizer read by :mod:`puredetok._build.pyclasses.mistral` (mistral-common, tiktoken)."""

    def decode(self) -> Callable[[list[int]], str]:
        """The tokenizer's own decode, with the codec's options bound."""
        if self.native is not None:
            return self.native.decode
        return _bound_decode(self.tokenizer, self.skip, self.cleanup_request, self.spaces)

    def fast_decode(self) -> Callable[[list[int]], str]:
        """The backend's own decode (plus cleanup), where that is what ``tokenizer.decode`` does;
        else ``tokenizer.decode``.
        """
        if self.backend is None or override(self.tokenizer) is not None:
            return self.decode()
        return _bound_decode(self.backend, self.skip, self.cleanup, None)

    def batch(self, fast: bool) -> Oracle:
        """Decodes a batch; with ``fast``, through ``decode_batch`` of the backend (only where that
        is what ``tokenizer.decode`` does); a sequence the decode refuses gives None.
        """
        backend = self.backend
        if fast and backend is not None:
            skip, cleanup = self.skip, self.cleanup

            def batched(sequences: Sequence[Sequence[int]]) -> list[str | None]:
                texts: list[str] = []
                for start in range(0, len(sequences), _DECODE_CHUNK):
                    texts += backend.decode_batch(
                        sequences[start : start + _DECODE_CHUNK], skip_special_tokens=skip
                    )
                return [apply_rules(TRANSFORMERS_RULES, t) if cleanup else t for t in texts]

            return _guarded(batched, self.decode())
        decode = self.decode()
        return lambda sequences: [decode_or_none(decode, list(ids)) for ids in sequences]


def reference_decode(
    tokenizer: TokenizerLike,
    *,
    skip_special_tokens: bool,
    clean_up_tokenization_spaces: bool | None = None,
    spaces_between_special_tokens: bool | None = None,
) -> Callable[[list[int]], str]:
    """``ids -> text``: the tokenizer's own decode with these options, as :func:`codec_for` models
    it, the one text the testing kit, replay and the audit check against. A ``tokenizers.Tokenizer``
    and a decode with no cleanup option (mistral-common's, tiktoken's) get ``transformers``' cleanup
    applied to their text; an option left None is not passed (the tokenizer's default), and a
    ``tokenizers.Tokenizer``, whose decode has no such option, is not given ``spaces_between_special_tokens``.
    Raises :class:`~puredetok.errors.OptionTypeError` for an option of the wrong type,
    :class:`UnsupportedTokenizerError` for an object with no ``decode``.
    """
    flag("skip_special_tokens", skip_special_tokens)
    optional_flag("clean_up_tokenization_spaces", clean_up_tokenization_spaces)
    optional_flag("spaces_between_special_tokens", spaces_between_special_tokens)
    native = read_native(tokenizer, skip=skip_special_tokens, cleanup_request=clean_up_tokenization_spaces)
    if native is not None:
        return native.decode
    if not callable(getattr(tokenizer, "decode", None)):
        raise UnsupportedTokenizerError(
            f"cannot decode with a {type(tokenizer).__name__}: it has no decode method"
        )
    return _bound_decode(
        tokenizer, skip_special_tokens, clean_up_tokenization_spaces, spaces_between_special_tokens
    )


def _bound_decode(
    tokenizer: Any, skip: bool, cleanup: bool | None, spaces: bool | None
) -> Callable[[list[int]], str]:
    """The decode of a ``tokenizers.Tokenizer`` or of a ``transformers`` (or alike) tokenizer with
    the options bound; an option left None is not passed (the tokenizer's own default)."""
    if is_backend(tokenizer):
        if cleanup:
            return functools.partial(_raw_with_cleanup, tokenizer, skip)
        return functools.partial(tokenizer.decode, skip_special_tokens=skip)
    options: dict[str, Any] = {"skip_special_tokens": skip}
    if cleanup is not None:
        options["clean_up_tokenization_spaces"] = cleanup
    if spaces is not None:
        options["spaces_between_special_tokens"] = spaces
    return functools.partial(tokenizer.decode, **options)


def _raw_with_cleanup(tokenizer: tokenizers.Tokenizer, skip: bool, ids: list[int]) -> str:
    return apply_rules(TRANSFORMERS_RULES, tokenizer.decode(ids, skip_special_tokens=skip))


def _guarded(batched: Oracle, decode: Callable[[list[int]], str]) -> Oracle:
    def run(sequences: Sequence[Sequence[int]]) -> list[str | None]:
        try:
            return batched(sequences)
        except BaseException as error:
            if isinstance(error, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            return [decode_or_none(decode, list(ids)) for ids in sequences]

    return run


def _resolve_cleanup(tokenizer: object, backend: tokenizers.Tokenizer | None, requested: bool | None) -> bool:
    """What ``tokenizer.decode`` does about cleanup, with transformers' BPE exception applied."""
    if is_backend(tokenizer):
        return bool(requested)
    flag = (
        requested
        if requested is not None
        else bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))
    )
    if not flag:
        return False
    if backend is None:
        return True
    # transformers 5.7 and later skip the cleanup of a BPE backend's text unless this switch is on;
    # they set it on every tokenizer, and the releases before them (which clean BPE text up too)
    # have no such attribute.
    forced = getattr(
        tokenizer, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", None
    )
    if forced is None:
        return True
    return not (type(backend.model).__name__ == "BPE" and not forced)


def resolved_cleanup(tokenizer: TokenizerLike, clean_up_tokenization_spaces: bool | None) -> bool:
    """Whether ``tokenizer``'s decode with this cleanup option applies ``transformers``' cleanup:
    the ``clean_up_tokenization_spaces`` that :func:`codec_for` records in its codec, without
    building one (None: the tokenizer's own default; ``transformers``' exception for a BPE backend,
    whose text it leaves as it is, resolved). Raises :class:`~puredetok.errors.OptionTypeError`
    for an option of the wrong type.
    """
    optional_flag("clean_up_tokenization_spaces", clean_up_tokenization_spaces)
    native = read_native(tokenizer, skip=False, cleanup_request=clean_up_tokenization_spaces)
    if native is not None:
        return native.cleanup
    return _resolve_cleanup(tokenizer, backend_of(tokenizer), clean_up_tokenization_spaces)


def _fingerprint(*parts: object) -> str:
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, list):
            digest.update(
                "\x1f".join("\x1e" if t is None else str(t) for t in part).encode("utf-8", "surrogatepass")
            )
        else:
            digest.update(repr(part).encode())
        digest.update(b"\x1d")
    return digest.hexdigest()[:32]


def _text_ids(source: _Source) -> list[int]:
    """The ids of the check's text, or none if this tokenizer cannot encode it."""
    tokenizer = source.tokenizer
    try:
        if source.native is not None:
            return source.native.encode(_CHECK_TEXT)
        if is_backend(tokenizer):
            return list(tokenizer.encode(_CHECK_TEXT, add_special_tokens=False).ids)
        return [int(i) for i in tokenizer.encode(_CHECK_TEXT, add_special_tokens=False)]
    except Exception:  # a tokenizer that cannot encode still decodes; the check does without
        return []


def _backend_model(source: _Source, max_byte_run: int | None) -> ClassModel:
    """The exact model of a ``tokenizers`` backend's decoding (plus transformers' cleanup)."""
    assert source.backend is not None
    problem = override(source.tokenizer, reference=harmless_reference(source.tokenizer))
    if problem is not None:
        raise Unmodelled(problem)
    parts = backend_parts(source.backend, source.skip, max_byte_run, by_token=source.by_token)
    tail: Sequence[Stage] = cleanup_stages() if source.cleanup else ()
    chain = compile_chain(parts.decoders, parts.tokens, tail)
    description = parts.names + (" + cleanup" if source.cleanup else "")
    family = _FAMILIES.get(parts.names, parts.names)
    return ClassModel(family, description, chain, parts.tokens, fast_oracle=True)


def _exact_model(source: _Source, max_byte_run: int | None) -> ClassModel:
    if source.native is not None:
        return source.native.build()
    known = model_for_class(
        source.tokenizer,
        size=source.size,
        skip=source.skip,
        cleanup=source.cleanup,
        max_byte_run=max_byte_run,
    )
    if known is not None:
        return known
    if source.backend is None:
        raise Unmodelled(
            f"{type(source.tokenizer).__name__} has no tokenizers backend to read the decoder from"
        )
    return _backend_model(source, max_byte_run)


def _long_byte_runs(model: ClassModel, max_byte_run: int | None) -> Callable[[Sequence[int]], bool]:
    """With a cap on held byte runs, the sequences where the cap may show: as many byte tokens as
    the cap (the model is documented to differ only when a longer run turns invalid).
    """
    if max_byte_run is None:
        return lambda ids: False
    byte_ids = frozenset(i for i, token in enumerate(model.vocabulary) if byte_token_value(token) is not None)
    return lambda ids: sum(i in byte_ids for i in ids) >= max_byte_run


def read_vocabulary(tokenizer: TokenizerLike) -> dict[str, int] | None:
    """The vocabulary with added tokens of the ``tokenizers`` backend that ``codec_for`` reads
    (None for a tokenizer without one): pass it to ``codec_for(..., vocabulary=...)`` to build
    several codecs of one tokenizer without reading it again (the crate's ``get_vocab`` takes
    0.2 - 0.8 s on a 150,000-token vocabulary, holding the interpreter's lock all along).
    """
    try:
        if read_native(tokenizer, skip=False, cleanup_request=None) is not None:
            return None
        backend = backend_of(tokenizer)
        return None if backend is None else backend.get_vocab(with_added_tokens=True)
    except (AttributeError, TypeError, LookupError):  # codec_for names what it cannot read
        return None


def _read(
    tokenizer: TokenizerLike,
    skip: bool,
    cleanup_request: bool | None,
    spaces: bool | None,
    known: Mapping[str, int] | None = None,
) -> _Source:
    native = read_native(tokenizer, skip=skip, cleanup_request=cleanup_request)
    if native is not None:
        # Their decode has no spaces_between_special_tokens option (as a tokenizers.Tokenizer's).
        return _Source(
            tokenizer,
            None,
            native.name,
            skip,
            cleanup_request,
            native.cleanup,
            native.size,
            native.added,
            None,
            None,
            native,
        )
    backend = backend_of(tokenizer)
    name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    by_token = None
    if backend is not None:
        by_token = (
            backend.get_vocab(with_added_tokens=True)
            if known is None
            else known
            if isinstance(known, dict)
            else dict(known)
        )
        size = max(by_token.values(), default=-1) + 1
        added = frozenset(backend.get_added_tokens_decoder())
    elif callable(getattr(tokenizer, "decode", None)) and callable(getattr(tokenizer, "get_vocab", None)):
        generic = cast(Any, tokenizer)
        size = max(len(generic), max(generic.get_vocab().values(), default=-1) + 1)
        added = frozenset(getattr(tokenizer, "added_tokens_decoder", {}) or ()) | frozenset(
            getattr(tokenizer, "all_special_ids", ())
        )
    else:
        missing = [name for name in ("decode", "get_vocab") if not callable(getattr(tokenizer, name, None))]
        raise UnsupportedTokenizerError(
            f"cannot build a codec for a {type(tokenizer).__name__}: expected a transformers tokenizer "
            "or a tokenizers.Tokenizer (or a mistral-common tokenizer, a wrapper of one, or a "
            f"tiktoken.Encoding); it has no {' and no '.join(missing)} method"
        )
    cleanup = _resolve_cleanup(tokenizer, backend, cleanup_request)
    if is_backend(tokenizer):
        spaces = None  # a tokenizers.Tokenizer's decode has no such option
    return _Source(tokenizer, backend, name, skip, cleanup_request, cleanup, size, added, by_token, spaces)


def _fallback(source: _Source, reason: str, *, trust_backend: bool = True) -> Codec:
    """The generic fallback; without ``trust_backend`` (its decode was seen to differ from the
    backend's) it decodes through ``tokenizer.decode`` alone.
    """
    tokens: list[Any]
    if source.native is not None:
        tokens = source.native.tokens()
    elif source.backend is not None:
        tokens = vocabulary(source.backend, source.skip, source.by_token)
    else:
        tokens = sorted(source.tokenizer.get_vocab().items(), key=lambda item: item[1])
    fast = trust_backend and source.backend is not None and override(source.tokenizer) is None
    if fast and _fast_path_differs(source):
        fast = False
    decode = source.fast_decode() if fast else source.decode()
    window = build_window(decode, source.batch(fast), source.size, source.added)
    return Codec(
        family="window",
        exact=False,
        reason=reason,
        vocab_size=source.size,
        skip_special_tokens=source.skip,
        clean_up_tokenization_spaces=source.cleanup,
        fingerprint=_fingerprint(
            "window",
            type(source.tokenizer).__name__,
            tokens,
            source.skip,
            source.cleanup_request,
            reason,
            source.spaces,
        ),
        name=source.name,
        decoding=window,
        added_ids=source.added,
    )


def _fast_path_differs(source: _Source) -> bool:
    """Whether the backend's decode (with the cleanup resolved) differs from ``tokenizer.decode``
    on a sample: the marks cleanup rewrites among the low ids and ids spread over the vocabulary
    (the exact model's check, which the fallback may not have had, decodes them all).
    """
    fast = source.batch(True)
    sample = sorted({*range(min(source.size, 4_096)), *range(0, source.size, max(1, source.size // 4_000))})
    probes = mark_probes(zip(sample, fast([[i] for i in sample])))
    probes += [[a, b] for a, b in zip(sample[::37], sample[::-41])]
    return fast_path_disagreement(fast, source.batch(False), probes) is not None


def codec_for(
    tokenizer: TokenizerLike,
    *,
    skip_special_tokens: bool = False,
    clean_up_tokenization_spaces: bool | None = None,
    max_byte_run: int | None = None,
    out_of_vocab: OutOfVocab = "raise",
    window: bool = False,
    spaces_between_special_tokens: bool | None = None,
    vocabulary: Mapping[str, int] | None = None,
) -> Codec:
    """Build the codec of a ``transformers`` tokenizer or a ``tokenizers.Tokenizer``.

    ``clean_up_tokenization_spaces=None`` means whatever ``tokenizer.decode`` does by default.
    ``max_byte_run`` caps how many byte-fallback tokens a still-valid run may hold (None: no cap,
    always exact; with a cap, exact unless a valid run longer than the cap later turns invalid).
    ``out_of_vocab`` says what an id in ``[vocab_size, 2**32)`` does: ``"raise"``
    (:class:`~puredetok.InvalidTokenError`) or ``"ignore"`` (it decodes to nothing, exactly as
    ``tokenizer.decode`` skips it; ``ValueError`` if this tokenizer's decode does not).
    ``window=True`` builds the generic fallback codec even when an exact model exists (to compare).
    ``spaces_between_special_tokens`` is passed to ``tokenizer.decode`` (None: not passed):
    transformers' tokenizers-backed decode ignores it, and the build-time check then finds the
    exact model agrees; a class that acts on it (Wav2Vec2's CTC classes) is modelled without it or
    gets the fallback. A ``tokenizers.Tokenizer`` has no such option. ``vocabulary`` is
    :func:`read_vocabulary` of this tokenizer, if the caller already has it (read once for
    several codecs; the build-time check below still holds the model to ``tokenizer.decode``).

    The codec is exact (``codec.exact``) when puredetok recognises every part of how the tokenizer
    decodes and its model agrees with ``tokenizer.decode`` on the build-time check; otherwise it is
    the generic fallback (``codec.exact is False``; ``codec.reason`` says why, naming the first ids
    the model got wrong if the check failed).
    Raises :class:`UnsupportedTokenizerError` for an object that is not a tokenizer, or one with an
    empty vocabulary or an id past :data:`MAX_VOCAB`; :class:`~puredetok.errors.OptionTypeError` for
    an option of the wrong type (``skip_special_tokens="false"``), ``ValueError`` for one out of range.
    """
    flag("skip_special_tokens", skip_special_tokens)
    optional_flag("clean_up_tokenization_spaces", clean_up_tokenization_spaces)
    optional_flag("spaces_between_special_tokens", spaces_between_special_tokens)
    flag("window", window)
    max_byte_run = optional_whole("max_byte_run", max_byte_run, 1)
    choice("out_of_vocab", out_of_vocab, OUT_OF_VOCAB)
    try:
        source = _read(
            tokenizer,
            skip_special_tokens,
            clean_up_tokenization_spaces,
            spaces_between_special_tokens,
            vocabulary,
        )
        if source.size == 0:
            raise UnsupportedTokenizerError(
                f"{source.name} has an empty vocabulary: there is no id to decode"
            )
        if source.size > MAX_VOCAB:
            raise UnsupportedTokenizerError(
                f"{source.name} has an id of {source.size - 1:,}: a codec holds tables as long as the "
                f"largest id, and ids above {MAX_VOCAB - 1:,} are not supported"
            )
        codec = _codec(source, max_byte_run, window)
    except (AttributeError, TypeError, LookupError) as error:
        if isinstance(error, UnsupportedTokenizerError):
            raise
        raise unreadable(tokenizer, error) from error
    return (
        ignoring_out_of_vocab(codec, source.decode(), type(tokenizer).__name__)
        if out_of_vocab == "ignore"
        else codec
    )


def _codec(source: _Source, max_byte_run: int | None, window: bool) -> Codec:
    if window:
        return _fallback(source, "the generic fallback (window) codec was asked for")
    try:
        model = _exact_model(source, max_byte_run)
    except Unmodelled as error:
        return _fallback(source, f"not modelled exactly: {error}")
    if len(model.vocabulary) != source.size:
        return _fallback(
            source, f"{model.description}: the model covers {len(model.vocabulary)} ids of {source.size}"
        )
    real = source.batch(False)
    fast = source.batch(True) if model.fast_oracle else real
    problem = check_model(
        model.chain,
        source.size,
        singles=fast,
        sequences=fast,
        real=real,
        added=source.added,
        text_ids=[i for i in _text_ids(source) if 0 <= i < source.size],
        exempt=_long_byte_runs(model, max_byte_run),
    )
    if problem is not None:
        reason = f"the exact model ({model.description}) disagrees with decode on {problem.text}"
        return _fallback(source, reason, trust_backend=not problem.fast_path)
    basis = _fingerprint(model.description, source.skip, model.vocabulary)
    cap = max_byte_run if _caps_runs(model.chain) else None
    return Codec(
        family=model.family,
        exact=True,
        reason=_exact_reason(model.description, cap),
        vocab_size=source.size,
        skip_special_tokens=source.skip,
        clean_up_tokenization_spaces=source.cleanup,
        fingerprint=_fingerprint(basis, cap),
        name=source.name,
        decoding=model.chain,
        added_ids=source.added,
        basis=basis,
    )


def _caps_runs(decoding: object) -> bool:
    """Whether a byte-run cap can change this decoding: its first stage collects byte-fallback runs
    and some id is a byte token (a cap on any other decoding changes nothing, and is ignored).
    """
    return (
        isinstance(decoding, Chain)
        and bool(decoding.stages)
        and isinstance(decoding.stages[0], ByteFallbackStage)
        and any(type(value) is int for value in decoding.table)
    )


def _exact_reason(description: str, cap: int | None) -> str:
    held = "" if cap is None else f" (byte runs held up to {cap} tokens)"
    return f"exact model: {description}{held}"


def with_max_byte_run(codec: Codec, max_byte_run: int | None) -> Codec | None:
    """``codec`` with another cap on held byte-fallback runs (as ``codec_for(...,
    max_byte_run=...)``), derived from its tables instead of rebuilt; None where it cannot be
    (the generic fallback: build it with :func:`codec_for`).

    The derived codec equals (its fingerprint too) and decodes exactly as the one ``codec_for``
    builds from the same tokenizer and options with that cap: the cap only changes the byte-run
    stage, never the per-id tables, which it shares with ``codec`` (no copy). Where a cap changes
    nothing (no byte-fallback stage, or no byte token), ``codec`` itself is returned.
    """
    max_byte_run = optional_whole("max_byte_run", max_byte_run, 1)
    decoding = codec.decoding
    if not codec.exact or not codec.basis or not isinstance(decoding, Chain):
        return None
    if not _caps_runs(decoding):
        return codec
    stage = decoding.stages[0]
    assert isinstance(stage, ByteFallbackStage)
    if stage.max_run == max_byte_run:
        return codec
    old = "" if stage.max_run is None else f" (byte runs held up to {stage.max_run} tokens)"
    description = codec.reason.removeprefix("exact model: ").removesuffix(old)
    fingerprint = _fingerprint(codec.basis, max_byte_run)
    chain = attrs.evolve(decoding, stages=(ByteFallbackStage(max_byte_run), *decoding.stages[1:]))
    return codec.sharing(
        reason=_exact_reason(description, max_byte_run),
        fingerprint=ignoring_fingerprint(fingerprint) if codec.out_of_vocab == "ignore" else fingerprint,
        decoding=chain,
    )
