"""Mistral's tokenizers as engines hold them: mistral-common's objects, the wrappers around them,
and ``tiktoken.Encoding``.

mistral-common (``tokenizer_mode="mistral"`` in vLLM and SGLang) decodes in Python, through one of
two inner tokenizers:

* ``Tekkenizer`` (``tekken_*.json``): byte-level BPE on tiktoken, control ids first
  (:mod:`puredetok._core.pyclasses.tekken`);
* ``SentencePieceTokenizer`` (``tokenizer.model.v1``, ``*.model.v3``, ``*.model.v7``): with
  ``SpecialTokenPolicy.IGNORE`` the ``sentencepiece`` library's own decode (control pieces are
  nothing, byte pieces are assembled, ``<unk>`` is `` ⁇ ``: modelled by the stage of
  :mod:`puredetok._core.pyclasses.marian`); with ``KEEP``, every id's raw piece (``▁`` and
  ``<0x0A>`` included) joined as they are.

``decode(ids, special_token_policy)`` of ``Tekkenizer``, ``SentencePieceTokenizer``, the instruct
tokenizer and mistral-common's ``MistralTokenizer`` is the inner tokenizer's; ``skip_special_tokens``
is ``IGNORE`` (True) or ``KEEP`` (False). ``RAISE`` is ``IGNORE`` on ids without a control id and an
error on the others: puredetok has no codec for it (use ``skip_special_tokens=True``; a caller that
must refuse control ids checks them, e.g. with ``codec.added_ids``).

``transformers``' ``MistralCommonBackend`` decodes through the same object with ``IGNORE`` or
``KEEP``, then applies ``clean_up_tokenization`` (if its ``clean_up_tokenization_spaces``, off by
default) and, with ``skip_special_tokens``, removes a leading ``lang:xx`` (two ASCII lowercase
letters: Voxtral's language tag) from the whole text: :class:`~puredetok._core.pyclasses.mistral.LangTagStage` holds the first (at most
6) characters while they may still be that tag.

:func:`mistral_tokenizer_of` is the one place that unwraps an engine's object; the attribute paths
it follows are listed there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from puredetok._build.compile import compile_chain
from puredetok._build.pyclasses.base import ClassModel, Given
from puredetok._build.pyclasses.marian import piece_value
from puredetok._build.pyclasses.spm import read_settings
from puredetok._build.pyclasses.tekken import special_token_ids, tekken_model, tiktoken_model
from puredetok._build.reading import loaded_class, override
from puredetok._core.decoders.base import Stage, Unmodelled
from puredetok._core.decoders.cleanup import TRANSFORMERS_RULES, apply_rules, cleanup_stages
from puredetok._core.pyclasses.marian import MarianStage
from puredetok._core.pyclasses.mistral import LangTagStage
from puredetok.errors import UnsupportedTokenizerError

_TEKKEN = ("mistral_common.tokens.tokenizers.tekken", "Tekkenizer")
_SPM = ("mistral_common.tokens.tokenizers.sentencepiece", "SentencePieceTokenizer")
_MISTRAL = ("mistral_common.tokens.tokenizers.mistral", "MistralTokenizer")
_INSTRUCT = ("mistral_common.tokens.tokenizers.instruct", "InstructTokenizerBase")
_BACKEND = ("transformers.tokenization_mistral_common", "MistralCommonBackend")
_TIKTOKEN = ("tiktoken.core", "Encoding")

WRAPPER_PATHS: tuple[tuple[str, ...], ...] = (
    (),
    ("tokenizer",),
    ("instruct_tokenizer", "tokenizer"),
    ("instruct", "tokenizer"),
    ("tokenizer", "instruct_tokenizer", "tokenizer"),
    ("mistral", "instruct_tokenizer", "tokenizer"),
    ("transformers_tokenizer", "tokenizer", "instruct_tokenizer", "tokenizer"),
)
"""The attribute paths :func:`mistral_tokenizer_of` follows from an object to a ``Tekkenizer`` or
``SentencePieceTokenizer``, in this order: the object itself; ``.tokenizer`` (mistral-common's
instruct tokenizer, vLLM's ``MistralTokenizer``); ``.instruct_tokenizer.tokenizer``
(mistral-common's ``MistralTokenizer``); ``.instruct.tokenizer`` (vLLM);
``.tokenizer.instruct_tokenizer.tokenizer`` (``transformers``' ``MistralCommonBackend``);
``.mistral.instruct_tokenizer.tokenizer`` and
``.transformers_tokenizer.tokenizer.instruct_tokenizer.tokenizer`` (vLLM)."""

def _is(obj: object, location: tuple[str, str]) -> bool:
    cls = loaded_class(*location)
    return cls is not None and isinstance(obj, cls)


def _inner_kind(obj: object) -> str | None:
    if _is(obj, _TEKKEN):
        return "tekken"
    if _is(obj, _SPM):
        return "spm"
    return None


def mistral_tokenizer_of(obj: object) -> tuple[Any, tuple[str, ...]] | None:
    """The mistral-common ``Tekkenizer`` or ``SentencePieceTokenizer`` an engine's object decodes
    through, and the attribute path to it (one of :data:`WRAPPER_PATHS`); None if no path leads
    to one. Only attributes are read (``getattr``; a property that raises counts as absent).
    """
    if loaded_class(*_TEKKEN) is None and loaded_class(*_SPM) is None:
        return None  # mistral-common is not loaded: no object of its classes exists
    for path in WRAPPER_PATHS:
        current: Any = obj
        for name in path:
            try:
                current = getattr(current, name, None)
            except Exception:  # a foreign property that raises: this path does not lead anywhere
                current = None
            if current is None:
                break
        if current is not None and _inner_kind(current) is not None:
            return current, path
    return None


@attrs.frozen(eq=False)
class Native:
    """A tokenizer that decodes outside ``transformers``' classes and ``tokenizers``, read once."""

    name: str
    size: int
    added: frozenset[int]
    """The control (special) ids."""
    cleanup: bool
    decode: Callable[[list[int]], str]
    """The object's own decode with the codec's options bound (the check's oracle)."""
    encode: Callable[[str], list[int]]
    build: Callable[[], ClassModel]
    """The exact model (raises :class:`Unmodelled`)."""
    tokens: Callable[[], list[Any]]
    """Per id, what identifies it (for a fallback codec's fingerprint)."""


def _policy(skip: bool) -> Any:
    module = sys.modules["mistral_common.tokens.tokenizers.base"]
    policy = module.SpecialTokenPolicy
    return policy.IGNORE if skip else policy.KEEP


def _checked_class(obj: object, location: tuple[str, str], methods: tuple[str, ...]) -> None:
    """Unmodelled if the object's class or the object itself replaces a method decoding relies on."""
    problem = override(obj, loaded_class(*location), methods=methods)
    if problem is not None:
        raise Unmodelled(problem)


def _inner_model(inner: Any, kind: str, skip: bool, tail: list[Stage], suffix: str) -> ClassModel:
    if kind == "tekken":
        _checked_class(inner, _TEKKEN, ("decode", "_decode_all", "id_to_piece", "id_to_byte_piece"))
        return tekken_model(inner, skip=skip, tail=tail, suffix=suffix)
    _checked_class(inner, _SPM, ("decode", "_decode_with_special_tokens", "id_to_piece", "is_special"))
    return spm_model(inner, skip=skip, tail=tail, suffix=suffix)


def spm_model(tokenizer: Any, *, skip: bool, tail: Iterable[Stage] = (), suffix: str = "") -> ClassModel:
    """The model of mistral-common's ``SentencePieceTokenizer.decode``: ``IGNORE`` is the
    ``sentencepiece`` library's decode (read from the model's proto), ``KEEP`` the raw pieces.
    """
    sp = tokenizer._model  # the SentencePieceProcessor its decode calls
    size = int(tokenizer.n_words)
    pieces = [str(sp.id_to_piece(token_id)) for token_id in range(size)]
    if skip:
        settings = read_settings(sp.serialized_model_proto())
        values: list[Any] = [piece_value(sp, piece, settings) for piece in pieces]
        chain = compile_chain([Given(MarianStage())], values, tuple(tail))
        what = "SentencePiece's decode (IGNORE)"
    else:
        values = list(pieces)
        chain = compile_chain([Given(None)], values, tuple(tail))
        what = "raw pieces joined (KEEP)"
    return ClassModel(
        "mistral_sentencepiece", f"mistral-common SentencePiece: {what}{suffix}", chain, values, False
    )


def _name(obj: Any, inner: Any) -> str:
    try:
        path = inner.file_path
    except Exception:  # a Tekkenizer built without a file has none
        return type(obj).__name__
    return f"{type(obj).__name__}({getattr(path, 'name', path)})"


def _controls(inner: Any, kind: str) -> frozenset[int]:
    if kind == "tekken":
        return frozenset(range(int(inner.num_special_tokens)))
    return frozenset(int(i) for i in inner.special_ids)


def _with_cleanup(decode: Callable[[list[int]], str], cleanup: bool) -> Callable[[list[int]], str]:
    if not cleanup:
        return decode
    return lambda ids: apply_rules(TRANSFORMERS_RULES, decode(ids))


def read_native(obj: Any, *, skip: bool, cleanup_request: bool | None) -> Native | None:
    """What :func:`~puredetok.codec_for` reads from a mistral-common object, a wrapper of one
    (:func:`mistral_tokenizer_of`) or a ``tiktoken.Encoding``; None for anything else.

    ``clean_up_tokenization_spaces``: for ``MistralCommonBackend`` (and a wrapper of one) what its
    decode does (None: its own default); for the other objects, whose decode has no such option,
    True applies ``transformers``' cleanup to their text, as for a ``tokenizers.Tokenizer``.
    """
    if _is(obj, _TIKTOKEN):
        return _read_tiktoken(obj, skip, bool(cleanup_request))
    found = mistral_tokenizer_of(obj)
    if found is None:
        return None
    inner, path = found
    kind = _inner_kind(inner)
    assert kind is not None
    size = int(inner.n_words)
    backend = obj if _is(obj, _BACKEND) else getattr(obj, "transformers_tokenizer", None)
    if not _is(backend, _BACKEND):
        backend = None
    problem: str | None = None
    if _is(obj, _TEKKEN) or _is(obj, _SPM) or _is(obj, _MISTRAL) or _is(obj, _INSTRUCT):
        cleanups, lang = int(bool(cleanup_request)), False
        policy = _policy(skip)
        decode = _with_cleanup(lambda ids: str(obj.decode(ids, special_token_policy=policy)), cleanups > 0)
    elif backend is obj:
        problem = override(obj, reference=loaded_class(*_BACKEND))
        default = bool(getattr(obj, "clean_up_tokenization_spaces", False))
        cleanups, lang = int(default if cleanup_request is None else cleanup_request), skip
        transformers_tokenizer: Any = obj

        def decode(ids: list[int]) -> str:
            return str(
                transformers_tokenizer.decode(
                    ids, skip_special_tokens=skip, clean_up_tokenization_spaces=cleanup_request
                )
            )

    else:
        wrapper: Any = obj
        # A wrapper (vLLM's MistralTokenizer): its decode takes skip_special_tokens; the model is its
        # MistralCommonBackend's (with that backend's default cleanup) if it has one, else the inner
        # tokenizer's; a requested cleanup is applied to its text. The check decides.
        own = backend is not None and bool(getattr(backend, "clean_up_tokenization_spaces", False))
        cleanups, lang = int(own) + int(bool(cleanup_request)), skip and backend is not None
        decode = _with_cleanup(
            lambda ids: str(wrapper.decode(ids, skip_special_tokens=skip)), bool(cleanup_request)
        )
    cleanup = cleanups > 0
    tail: list[Stage] = [stage for _ in range(cleanups) for stage in cleanup_stages()]
    suffix = " + cleanup" * cleanups
    if lang:
        tail.append(LangTagStage())
        suffix += " + a leading lang:xx removed"

    def build() -> ClassModel:
        if problem is not None:
            raise Unmodelled(problem)
        return _inner_model(inner, kind, skip, tail, suffix)

    def encode(text: str) -> list[int]:
        return [int(i) for i in inner.encode(text, bos=False, eos=False)]

    return Native(
        name=_name(obj, inner) + (f" via .{'.'.join(path)}" if path else ""),
        size=size,
        added=_controls(inner, kind),
        cleanup=cleanup,
        decode=decode,
        encode=encode,
        build=build,
        tokens=lambda: [inner.id_to_piece(i) for i in range(size)],
    )


def _read_tiktoken(encoding: Any, skip: bool, cleanup: bool) -> Native:
    special = special_token_ids(encoding)
    size = int(encoding.n_vocab)

    def decode(ids: list[int]) -> str:
        kept = [i for i in ids if i not in special] if skip else ids
        return str(encoding.decode(kept, errors="replace"))

    def build() -> ClassModel:
        _checked_class(encoding, _TIKTOKEN, ("decode", "decode_bytes", "decode_single_token_bytes"))
        model = tiktoken_model(encoding, skip=skip)
        if not cleanup:
            return model
        chain = compile_chain([Given(model.chain.stages[0])], model.vocabulary, cleanup_stages())
        return ClassModel(model.family, model.description + " + cleanup", chain, model.vocabulary, False)

    def tokens() -> list[Any]:
        out: list[Any] = []
        for token_id in range(size):
            try:
                out.append(encoding.decode_single_token_bytes(token_id))
            except KeyError:
                out.append(None)
        return out

    return Native(
        name=f"tiktoken.Encoding({encoding.name})",
        size=size,
        added=special,
        cleanup=cleanup,
        decode=_with_cleanup(decode, cleanup),
        encode=lambda text: [int(i) for i in encoding.encode(text, disallowed_special=())],
        build=build,
        tokens=tokens,
    )


def unreadable(obj: object, error: BaseException) -> UnsupportedTokenizerError:
    """The error for an object whose reading failed part way (an attribute missing or of the wrong
    type), naming its type and what was missing.
    """
    return UnsupportedTokenizerError(
        f"cannot build a codec for a {type(obj).__name__}: reading it failed "
        f"({type(error).__name__}: {error})"
    )
