"""Reading a tokenizer object: its ``tokenizers`` backend, its vocabulary, and whether anything
changes how its ``decode`` works beyond what puredetok models.

Only :mod:`puredetok._build.build` and :mod:`puredetok._build.pyclasses` use this module; it reads
attributes and never calls ``decode``. It does not import ``tokenizers`` nor ``transformers``: an
object of their classes exists only once they are imported, so their classes are looked up among
the modules already imported (the stepping core and the layers above it load without them).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TypeGuard

if TYPE_CHECKING:
    import tokenizers

DECODING_METHODS = ("decode", "_decode", "convert_tokens_to_string", "clean_up_tokenization", "batch_decode")
"""Methods whose override changes what ``tokenizer.decode`` returns."""


def loaded_class(module: str, name: str) -> type | None:
    """The class ``name`` of ``module`` if that module is imported, else None: an object of a class
    exists only once its module is, so the builder never imports a tokenizer library itself.
    """
    found = getattr(sys.modules.get(module), name, None)
    return found if isinstance(found, type) else None


def is_backend(obj: object) -> TypeGuard[tokenizers.Tokenizer]:
    """Whether ``obj`` is a ``tokenizers.Tokenizer``."""
    cls = loaded_class("tokenizers", "Tokenizer")
    return cls is not None and isinstance(obj, cls)


def backend_of(tokenizer: object) -> tokenizers.Tokenizer | None:
    """The ``tokenizers.Tokenizer`` that decodes for this object (itself, or its backend), if any."""
    if is_backend(tokenizer):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend if is_backend(backend) else None


def _transformers_bases() -> tuple[type, ...]:
    if "transformers" not in sys.modules:
        return ()  # no object of its classes exists
    from transformers import PreTrainedTokenizerBase
    from transformers.tokenization_python import PythonBackend
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    return (TokenizersBackend, PythonBackend, PreTrainedTokenizerBase)


def override(
    tokenizer: object,
    reference: type | None = None,
    *,
    backend_decode_allowed: bool = False,
    methods: tuple[str, ...] = DECODING_METHODS,
) -> str | None:
    """The first way this object changes decoding beyond what ``reference`` does, or None.

    ``reference`` defaults to the ``transformers`` base class the object builds on. Looked at: a
    decoding method (of ``methods``) its class overrides, one set on the object itself, and a
    ``decode`` set on its ``tokenizers`` backend (unless ``backend_decode_allowed``: a class model
    that reads it).
    """
    for name in methods:
        if name in getattr(tokenizer, "__dict__", {}):
            return f"{name} set on the object"
    backend = backend_of(tokenizer)
    if backend is not None:
        for name in ("decode", "decode_batch"):
            if name in getattr(backend, "__dict__", {}) and not (backend_decode_allowed and name == "decode"):
                return f"the backend's {name} replaced"
    if is_backend(tokenizer):
        return None
    if reference is None:
        reference = next((base for base in _transformers_bases() if isinstance(tokenizer, base)), None)
        if reference is None:
            return None
    cls = type(tokenizer)
    for name in methods:
        if getattr(cls, name, None) is not getattr(reference, name, None):
            return f"{cls.__name__} overrides {name}"
    return None


def vocabulary(
    backend: tokenizers.Tokenizer, skip_special_tokens: bool, by_token: dict[str, int] | None = None
) -> list[str | None]:
    """Per id, the token string the decoders receive; None where the decode drops the id.

    ``by_token`` is ``backend.get_vocab(with_added_tokens=True)`` if the caller already has it.
    """
    if by_token is None:
        by_token = backend.get_vocab(with_added_tokens=True)
    size = max(by_token.values(), default=-1) + 1
    tokens: list[str | None] = [None] * size
    for token, token_id in by_token.items():
        if tokens[token_id] is not None:  # two tokens share the id: the crate spells it one way
            token = backend.id_to_token(token_id) or token
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
