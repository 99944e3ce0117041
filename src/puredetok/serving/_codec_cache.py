"""The one codec cache: the manager (so the worker and mini-sglang's tokenizer process), the
worker's builder and parking, and the vLLM and SGLang plugins ask a :class:`CodecCache` for their
codecs. It keys a codec by the tokenizer object and :class:`CodecOptions` (without
``spaces_between_special_tokens`` where decode ignores it: :func:`ignores_spaces_option`), builds
it once under concurrency, keeps at most ``max_codecs`` entries, derives another ``max_byte_run``
instead of building it, shares one object between options that decode alike, and keeps a failed
build's error as its answer. docs/adapters.md ("How codecs are cached and shared") says more.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from puredetok._build import codec_for, read_vocabulary, with_max_byte_run
from puredetok._core import OUT_OF_VOCAB, Codec, OutOfVocab
from puredetok._options import choice, flag, optional_flag, optional_whole, whole

if TYPE_CHECKING:
    from puredetok.serving._messages import SamplingParams

DEFAULT_MAX_CODECS = 16
"""How many codecs a cache keeps by default (a manager's, the worker's, each engine plugin's)."""


@attrs.frozen
class CodecOptions:
    """The decode options a codec is built for (:func:`~puredetok.codec_for`'s), checked when made:
    an option of the wrong type is an :class:`~puredetok.errors.OptionTypeError`, one out of range a
    ``ValueError``, each naming it.
    """

    skip_special_tokens: bool = True
    clean_up_tokenization_spaces: bool | None = None
    spaces_between_special_tokens: bool | None = None
    max_byte_run: int | None = None
    """The cap on a held byte-fallback run (None: no cap; else >= 1)."""
    out_of_vocab: OutOfVocab = "raise"

    def __attrs_post_init__(self) -> None:
        flag("skip_special_tokens", self.skip_special_tokens)
        optional_flag("clean_up_tokenization_spaces", self.clean_up_tokenization_spaces)
        optional_flag("spaces_between_special_tokens", self.spaces_between_special_tokens)
        optional_whole("max_byte_run", self.max_byte_run, 1)
        choice("out_of_vocab", self.out_of_vocab, OUT_OF_VOCAB)


@attrs.frozen
class Setting:
    """A deployment's ``max_byte_run`` and ``out_of_vocab``, for the requests that leave them None."""

    max_byte_run: int | None = None
    """The cap on held byte-fallback runs (None: no cap)."""
    out_of_vocab: OutOfVocab = "raise"

    def __attrs_post_init__(self) -> None:
        optional_whole("max_byte_run", self.max_byte_run, 1)
        choice("out_of_vocab", self.out_of_vocab, OUT_OF_VOCAB)

    def options(
        self,
        skip_special_tokens: bool = True,
        clean_up_tokenization_spaces: bool | None = None,
        spaces_between_special_tokens: bool | None = None,
        max_byte_run: int | None = None,
        out_of_vocab: OutOfVocab | None = None,
    ) -> CodecOptions:
        """The codec options of a request that asks for these: ``max_byte_run`` and
        ``out_of_vocab`` None for this setting's, ``max_byte_run=0`` for no cap.
        """
        cap = self.max_byte_run if max_byte_run is None else optional_whole("max_byte_run", max_byte_run, 0)
        return CodecOptions(
            skip_special_tokens,
            clean_up_tokenization_spaces,
            spaces_between_special_tokens,
            cap or None,
            self.out_of_vocab if out_of_vocab is None else out_of_vocab,
        )

    def options_of(self, params: SamplingParams) -> CodecOptions:
        """:meth:`options` of a request's parameters (checked when the parameters were made, so
        each distinct set is made once: this runs as every request opens).
        """
        return _options_of(
            self,
            params.skip_special_tokens,
            params.clean_up_tokenization_spaces,
            params.spaces_between_special_tokens,
            params.max_byte_run,
            params.out_of_vocab,
        )


@functools.lru_cache(maxsize=256)
def _options_of(setting: Setting, *fields: Any) -> CodecOptions:
    return setting.options(*fields)


plain_options = functools.lru_cache(maxsize=256)(CodecOptions)
""":class:`CodecOptions`, made once per distinct set of (hashable) options: for callers that make
them as each request opens, from values already checked (an engine plugin's flags)."""


def ignores_spaces_option(tokenizer: Any) -> bool:
    """Whether ``tokenizer.decode`` ignores ``spaces_between_special_tokens``: a raw
    ``tokenizers.Tokenizer`` (no such option) or a transformers class that keeps the
    ``tokenizers``-backed decode as it is (which drops the option). One codec then serves both values.
    """
    try:
        import tokenizers
    except ImportError:
        return False
    if isinstance(tokenizer, tokenizers.Tokenizer):
        return True
    try:
        from transformers import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return False
    cls = type(tokenizer)
    return (
        issubclass(cls, TokenizersBackend)
        and getattr(cls, "decode", None) is PreTrainedTokenizerBase.decode
        and getattr(cls, "_decode", None) is TokenizersBackend._decode
    )


def exact_or_why(got: Codec | Exception) -> tuple[Codec | None, str]:
    """What an engine plugin needs of :meth:`CodecCache.built`: the codec if it is exact, else None
    and why (the fallback codec's reason, or the error its build raised).
    """
    if isinstance(got, Exception):
        return None, f"{type(got).__name__}: {got}"
    return (got, "") if got.exact else (None, got.reason)


Build = Callable[..., Codec]
"""How a cache builds a codec: called as :func:`~puredetok.codec_for` is, with the tokenizer and
the options as keywords (and ``vocabulary`` when it was read, see :meth:`CodecCache.read`)."""


class _Source:
    """A tokenizer the cache has codecs of, named by a weak reference (held, if it takes none)."""

    def __init__(self, tokenizer: Any) -> None:
        try:
            self.named: Callable[[], Any] = weakref.ref(tokenizer)
        except TypeError:
            self.named = lambda: tokenizer
        self.ignores_spaces = ignores_spaces_option(tokenizer)
        self.vocabulary: Mapping[str, int] | None = None
        self.read = False
        """Whether :attr:`vocabulary` was read (None for a tokenizer without one)."""


_Key = tuple[_Source, bool, "bool | None", "bool | None", "int | None", str]
"""``(source, skip_special_tokens, clean_up_tokenization_spaces, spaces_between_special_tokens,
max_byte_run, out_of_vocab)``."""


class _Build:
    """A build under way: who asks for its key meanwhile waits for its result."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Codec | Exception | None = None


class CodecCache:
    """The codecs of tokenizers and decode options, built once, bounded and shared (see the module).

    ``max_codecs`` bounds the entries kept (:data:`DEFAULT_MAX_CODECS`); ``build`` builds a codec
    (:func:`~puredetok.codec_for` by default). Safe to share between threads.
    """

    def __init__(self, max_codecs: int = DEFAULT_MAX_CODECS, *, build: Build = codec_for) -> None:
        self.max_codecs = whole("max_codecs", max_codecs, 1)
        """The most entries kept (a codec, or the error its build raised)."""
        self.evictions = 0
        """How many entries were dropped so far (a holder of codecs may check what is still kept)."""
        self._build = build
        self._lock = threading.Lock()
        self._sources: dict[int, _Source] = {}
        """Per ``id(tokenizer)``, its source (checked: an id names another object once its own is gone)."""
        self._kept: OrderedDict[_Key, Codec | Exception] = OrderedDict()
        """The entries kept, least recently used first."""
        self._alive: weakref.WeakValueDictionary[_Key, Codec] = weakref.WeakValueDictionary()
        """Every codec given out, while anything holds it."""
        self._building: dict[_Key, _Build] = {}

    def __len__(self) -> int:
        """The number of entries kept."""
        return len(self._kept)

    def read(self, tokenizer: Any, vocabulary: Mapping[str, int] | None = None) -> None:
        """Read the vocabulary of ``tokenizer`` now (in this thread), or take ``vocabulary``, its
        :func:`~puredetok._build.read_vocabulary`, and build its codecs from it from then on, while
        the cache holds any of them: reading it holds the interpreter's lock for up to a second,
        which would stall a loop running beside a later build.
        """
        source = self._source(tokenizer)
        if not source.read:
            source.vocabulary = read_vocabulary(tokenizer) if vocabulary is None else vocabulary
            source.read = True

    def codec(self, tokenizer: Any, options: CodecOptions) -> Codec:
        """The codec of ``tokenizer`` for ``options``, built (or waited for) if it is not at hand;
        raises the error its build raised.
        """
        got = self.built(tokenizer, options)
        if isinstance(got, Exception):
            raise got.with_traceback(None)
        return got

    def built(self, tokenizer: Any, options: CodecOptions) -> Codec | Exception:
        """:meth:`codec`, with the error its build raised returned instead of raised."""
        key = self._key(tokenizer, options)
        with self._lock:  # the usual answer (a request's opening), before the loop below
            found = self._kept.get(key)
            if found is not None:
                self._kept.move_to_end(key)
                return found
        while True:
            with self._lock:
                found = self._at_hand(key)
                if found is not None:
                    return found
                build = self._building.get(key)
                mine = build is None
                if build is None:
                    build = self._building[key] = _Build()
            if mine:
                return self._built(tokenizer, key, build)
            build.done.wait()
            if build.result is not None:
                return build.result
            # that build was interrupted (not an Exception): ask again, maybe building it here

    def ready(self, tokenizer: Any, options: CodecOptions) -> bool:
        """Whether :meth:`codec` answers at once: the codec is kept (or still held by someone),
        can be derived now (another ``max_byte_run``; derived and kept here), or its build failed.
        """
        key = self._key(tokenizer, options)
        with self._lock:
            return self._at_hand(key) is not None

    def kept(self) -> list[Codec]:
        """The codecs kept now (not counting those dropped that something still holds)."""
        with self._lock:
            return [codec for codec in self._kept.values() if isinstance(codec, Codec)]

    def _source(self, tokenizer: Any) -> _Source:
        found = self._sources.get(id(tokenizer))
        if found is not None and found.named() is tokenizer:
            return found
        made = _Source(tokenizer)  # outside the lock: it may import transformers
        with self._lock:
            found = self._sources.get(id(tokenizer))
            if found is None or found.named() is not tokenizer:
                found = self._sources[id(tokenizer)] = made
            return found

    def _key(self, tokenizer: Any, options: CodecOptions) -> _Key:
        source = self._sources.get(id(tokenizer))
        if source is None or source.named() is not tokenizer:
            source = self._source(tokenizer)
        spaces = None if source.ignores_spaces else options.spaces_between_special_tokens
        return (
            source,
            options.skip_special_tokens,
            options.clean_up_tokenization_spaces,
            spaces,
            options.max_byte_run,
            options.out_of_vocab,
        )

    def _at_hand(self, key: _Key) -> Codec | Exception | None:
        """The entry for ``key`` if it can be had now (under the lock): kept, still held, or
        derived from a codec of the same other options.
        """
        kept = self._kept
        found = kept.get(key)
        if found is not None:
            kept.move_to_end(key)
            return found
        alive = self._alive.get(key)
        if alive is not None:
            return self._keep(key, alive)
        for other, codec in list(self._alive.items()):
            if other[:4] == key[:4] and other[5] == key[5]:
                derived = with_max_byte_run(codec, key[4])
                if derived is not None:
                    return self._keep(key, derived)
        return None

    def _built(self, tokenizer: Any, key: _Key, build: _Build) -> Codec | Exception:
        """Build the codec for ``key`` (outside the lock), keep it and give it to those waiting."""
        source, skip, cleanup, spaces, cap, ignore = key
        extra: dict[str, Any] = {"vocabulary": source.vocabulary} if source.read else {}
        result: Codec | Exception | None = None
        try:
            result = self._build(
                tokenizer,
                skip_special_tokens=skip,
                clean_up_tokenization_spaces=cleanup,
                spaces_between_special_tokens=spaces,
                max_byte_run=cap,
                out_of_vocab=ignore,
                **extra,
            )
        except MemoryError:
            raise  # not the options' answer: whoever waits asks again (and builds it)
        except Exception as error:  # the build's answer for this key, kept as such
            result = error.with_traceback(None)
        finally:
            with self._lock:
                del self._building[key]
                if result is not None:
                    result = build.result = self._keep(key, result)
            build.done.set()
        return result

    def _keep(self, key: _Key, entry: Codec | Exception) -> Codec | Exception:
        """Keep ``entry`` for ``key`` (under the lock) and return it, or the equal codec already
        given out (for a fallback, one of the same tokenizer); past :attr:`max_codecs`, drop the
        least recently used entries but this one.
        """
        if isinstance(entry, Codec):
            # a fallback calls its own tokenizer's decode: shared by that tokenizer's options only
            entry = next(
                (
                    other
                    for at, other in self._alive.items()
                    if other == entry and (other.exact or at[0] is key[0])
                ),
                entry,
            )
            self._alive[key] = entry
        kept = self._kept
        kept[key] = entry
        kept.move_to_end(key)
        if len(kept) > self.max_codecs:
            while len(kept) > self.max_codecs:
                kept.popitem(last=False)
                self.evictions += 1
            used = {other[0] for other in (*kept, *self._alive.keys(), *self._building)}
            sources = self._sources.items()
            self._sources = {
                at: source for at, source in sources if source in used and source.named() is not None
            }
        return entry
