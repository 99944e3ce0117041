"""Loading tokenizers offline, including the one embedded in the package (Qwen3, Apache-2.0)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import warnings
from collections.abc import Sized
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from puredetok._build import TokenizerLike
from puredetok.errors import PuredetokError

DEFAULT_TOKENIZER = "qwen3"
"""The name that stands for the embedded tokenizer (also used when no name is given)."""


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "tokenizer.model")
"""Files one of which a tokenizer folder usually has (named in the error when none is there)."""


class LoadedTokenizer(TokenizerLike, Protocol):
    """What puredetok uses of a tokenizer :func:`load_tokenizer` gives: a ``transformers``
    tokenizer, a ``tokenizers.Tokenizer`` or ``transformers``' ``MistralCommonBackend`` all have it.

    ``decode`` (:class:`~puredetok.TokenizerLike`: what :func:`~puredetok.codec_for`
    models), ``get_vocab`` and ``encode`` (text to ids; its result is a list of ids
    for ``transformers``, an ``Encoding`` with ``.ids`` for ``tokenizers``). What only some kinds
    have (``apply_chat_template``, ``backend_tokenizer``) is read where it is needed, by
    attribute, and its absence is a clear error; user code that calls such a method narrows the
    type first (``isinstance(tokenizer, transformers.PreTrainedTokenizerBase)``).
    """

    def decode(self, ids: list[int], /, *, skip_special_tokens: bool = ...) -> str:
        """The text of ``ids`` (each kind returns one text for a list of ids, although
        ``transformers`` declares ``str | list[str]``, a list for a batch).
        """
        ...

    def get_vocab(self) -> dict[str, int]:
        """Token string to id, added tokens included."""
        ...

    def encode(self, text: str, /, *args: Any, **kwargs: Any) -> Any:
        """The ids of ``text`` (a list, or an ``Encoding`` whose ``.ids`` they are)."""
        ...


class TokenizerLoadError(PuredetokError, ValueError):
    """A tokenizer name or path that cannot be loaded (offline)."""


def default_tokenizer_path() -> Path:
    """The folder of the embedded Qwen3 tokenizer files."""
    return Path(str(resources.files("puredetok") / "data" / "qwen3"))


_MISTRAL_MODEL = re.compile(r".*\.model(\.v\d+(m\d+)?)?")


def is_mistral_file(path: Path) -> bool:
    """Whether a file is one mistral-common loads: a Tekken ``tekken*.json`` or a SentencePiece
    ``*.model`` / ``*.model.v3`` / ``*.model.v7m1`` file (as mistral-common names them).
    """
    name = path.name
    tekken = name.startswith("tekken") and name.endswith(".json")
    return tekken or _MISTRAL_MODEL.fullmatch(name) is not None


def _mistral(path: Path) -> LoadedTokenizer:
    """A mistral-common file as ``transformers``' ``MistralCommonBackend`` (its encode and decode are
    ``transformers``' own; :func:`puredetok.codec_for` models it).
    """
    try:
        import mistral_common  # noqa: F401
    except ImportError:
        raise TokenizerLoadError(
            f"{str(path)!r} is a mistral-common tokenizer file: install mistral-common "
            "(pip install 'puredetok[mistral]') to load it"
        ) from None
    transformers = _quietly(__import__, "transformers")
    try:
        loaded: LoadedTokenizer = _quietly(transformers.MistralCommonBackend, tokenizer_path=str(path))
        return loaded
    except Exception as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise TokenizerLoadError(f"cannot read {str(path)!r} as a mistral-common file: {reason}") from None


def _quietly(function: Any, *args: Any, **kwargs: Any) -> Any:
    """Call transformers without its import-time banner and one-off warnings on stdout/stderr."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


def load_tokenizer(name_or_path: str | os.PathLike[str] | None = None) -> LoadedTokenizer:
    """A ``transformers`` tokenizer from a local folder, never from the network.

    ``None`` or ``"qwen3"`` gives the embedded default. A ``tokenizer.json`` file is loaded as a
    raw ``tokenizers.Tokenizer``; a mistral-common file (a Tekken ``tekken*.json`` or a SentencePiece
    ``*.model.v3``, see :func:`is_mistral_file`) as ``transformers``' ``MistralCommonBackend``
    (which needs mistral-common: ``pip install 'puredetok[mistral]'``). Raises
    :class:`TokenizerLoadError` with a one-line reason.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if name_or_path is None or str(name_or_path) == DEFAULT_TOKENIZER:
        path = default_tokenizer_path()
    else:
        path = Path(name_or_path)
    if not path.exists():
        raise TokenizerLoadError(f"no tokenizer at {str(path)!r}: give a folder with tokenizer files")
    if path.is_file() and is_mistral_file(path):
        return _mistral(path)
    if path.is_file():
        import tokenizers

        try:
            return tokenizers.Tokenizer.from_file(str(path))
        except Exception as error:
            raise TokenizerLoadError(f"cannot read {str(path)!r} as a tokenizer.json: {error}") from None
    transformers = _quietly(__import__, "transformers")
    try:
        tokenizer: LoadedTokenizer = _quietly(
            transformers.AutoTokenizer.from_pretrained, str(path), local_files_only=True
        )
    except Exception as error:
        reason = " ".join(str(error).split()) or type(error).__name__  # all of it, on one line
        if not any((path / name).exists() for name in TOKENIZER_FILES):
            reason = (
                f"the folder has none of the usual tokenizer files ({', '.join(TOKENIZER_FILES)}); "
                f"transformers says: {reason}"
            )
        raise TokenizerLoadError(f"cannot load a tokenizer from {str(path)!r}: {reason}") from None
    check_vocabulary(tokenizer, path)
    return tokenizer


def check_vocabulary(tokenizer: object, path: str | os.PathLike[str]) -> None:
    """Refuse a tokenizer that ``transformers`` (or an engine's loader) built from ``path``
    without its vocabulary: a folder whose vocabulary file is missing or compressed still loads,
    with only its special tokens. Raises :class:`TokenizerLoadError` saying so.
    """
    size = len(tokenizer) if isinstance(tokenizer, Sized) else None
    specials = len(set(getattr(tokenizer, "all_special_ids", ())))
    if size is not None and size <= max(specials, 1):
        packed = sorted(name.name for name in Path(path).glob("*.gz"))
        hint = f" ({', '.join(packed)} must be uncompressed)" if packed else ""
        raise TokenizerLoadError(
            f"cannot load a tokenizer from {str(path)!r}: it has no vocabulary, only its {size} "
            f"special tokens; the folder lacks its vocabulary file{hint}"
        )
