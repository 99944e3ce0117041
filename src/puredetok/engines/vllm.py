"""The vLLM plugin: vLLM's ``OutputProcessor`` detokenizes every request with puredetok.

``pip install puredetok[vllm]`` registers :func:`register` in vLLM's ``vllm.general_plugins``
entry point group, which vLLM loads in each of its processes; from then on
``IncrementalDetokenizer.from_new_request`` (the one place where vLLM's ``OutputProcessor`` picks
a request's detokenizer, for ``LLM``, ``AsyncLLM`` and the OpenAI server alike) hands out a
:class:`PuredetokDetokenizer` built on the core and the stop layer: the text is
``tokenizer.decode``'s, continued after the prompt (contract C), with vLLM's stop strings,
``include_stop_str_in_output``, ``min_tokens``, ``skip_special_tokens`` and
``spaces_between_special_tokens``; the engine core keeps handling stop ids, EOS and ``max_tokens``.
vLLM's derender endpoints (``OnlineDerenderer``) decode with puredetok too
(:mod:`puredetok.engines._vllm_derender`).

A request whose tokenizer puredetok cannot model exactly (or any failure of the plugin, also in
the middle of a request) gets vLLM's own detokenizer, and the reason is logged once: the plugin
never breaks the engine. Off: ``VLLM_PLUGINS`` without ``puredetok``, or ``PUREDETOK_VLLM=0``.

This module imports vLLM only when :func:`register` runs, so it can be imported (and type
checked) without vLLM.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from puredetok._build import codec_for
from puredetok._core import Codec, finish
from puredetok.engines import _vllm_derender
from puredetok.engines._cache import IdentityCache
from puredetok.engines._versions import announce, installed, parameters
from puredetok.errors import InvalidTokenError
from puredetok.serving._codec_cache import CodecCache, exact_or_why, plain_options
from puredetok.stops import StopRules, Stream, advance, close, open_like, open_stream

__all__ = [
    "ENABLE_VARIABLE",
    "HOOKED",
    "TESTED_VERSIONS",
    "PuredetokDetokenizer",
    "codec_of",
    "detokenizer_class",
    "enabled",
    "register",
    "registered",
    "unfit",
    "unregister",
    "warm",
]

ENABLE_VARIABLE = "PUREDETOK_VLLM"
"""The environment variable that turns the plugin off when it is ``0``, ``false``, ``no`` or ``off``
(read when vLLM loads its plugins)."""

TESTED_VERSIONS = ("0.32.0", "0.33.0", "0.34.0")
"""The vLLM versions whose own code the plugin was tested in (``engine_tests/vllm``, see
docs/engines/vllm.md). On another one whose classes are the ones the plugin was made for
(:func:`unfit`) it is used all the same, and says once that this version was not tested."""

_MAX_OPENINGS = 256
"""How many sets of stop parameters the plugin keeps prepared (compiling a set of stop strings
costs more than the rest of a request's opening; requests with the same set share it)."""

_WARM_OPTIONS = ((True, True), (False, True))
"""The decode options ``(skip_special_tokens, spaces_between_special_tokens)`` whose codecs are
built when vLLM makes an ``OutputProcessor``: vLLM's defaults, and ``skip_special_tokens=False``,
which vLLM's tool-call and reasoning parsers set on their requests."""

_LOGGER = logging.getLogger("vllm.puredetok")
"""The plugin's logger, under vLLM's own ``vllm`` logger so its lines show in vLLM's log."""

_logged: set[str] = set()
_openings: IdentityCache[Stream] = IdentityCache(_MAX_OPENINGS)
_lock = threading.Lock()
_original: list[Any] = []
_original_init: list[Any] = []


def _log_once(key: str, message: str, *args: object, error: bool = False) -> None:
    """A warning, once per ``key`` (``error``: with the exception being handled)."""
    if key not in _logged:
        _logged.add(key)
        _LOGGER.warning(message, *args, exc_info=error)


def enabled() -> bool:
    """Whether ``PUREDETOK_VLLM`` leaves the plugin on (it is on unless set to an off value)."""
    return os.environ.get(ENABLE_VARIABLE, "1").strip().lower() not in {"0", "false", "no", "off"}


def codec_of(
    tokenizer: object,
    skip_special_tokens: bool,
    spaces_between_special_tokens: bool,
    max_byte_run: int | None = None,
) -> Codec | None:
    """The exact codec for a tokenizer and decode options, from the plugin's codec cache (built
    once, at most :data:`~puredetok.serving._detokenize_manager.DEFAULT_MAX_CODECS` kept, a build
    under way waited for: see docs/adapters.md); ``None`` when puredetok cannot model this
    tokenizer exactly (the reason is logged once). Ids past the vocabulary decode to nothing, as in
    vLLM, when the tokenizer's decode skips them.
    """
    options = plain_options(skip_special_tokens, None, spaces_between_special_tokens, max_byte_run, "ignore")
    got = _CODECS.built(tokenizer, options)
    if isinstance(got, ValueError):  # this tokenizer's decode does not skip ids past its vocabulary
        got = _CODECS.built(
            tokenizer, plain_options(skip_special_tokens, None, spaces_between_special_tokens, max_byte_run)
        )
    codec, reason = exact_or_why(got)
    if codec is None:
        _log_once(
            f"codec {type(tokenizer).__name__}",
            "puredetok: %s is not modelled exactly (%s); its requests use vLLM's own detokenizer",
            type(tokenizer).__name__,
            reason,
        )
    return codec


def warm(tokenizer: object) -> threading.Thread:
    """Build the codecs of ``_WARM_OPTIONS`` for ``tokenizer`` in a thread of their own (vLLM
    makes an ``OutputProcessor`` when it starts, before it serves a request), so that requests
    with those options do not wait for one; the thread, which has started.
    """

    def build() -> None:
        for skip, spaces in _WARM_OPTIONS:
            try:
                codec_of(tokenizer, skip, spaces)
            except Exception:  # noqa: BLE001 - the first request builds it (or falls back)
                _log_once("warm", "puredetok: building a codec in advance failed", error=True)

    thread = threading.Thread(target=build, name="puredetok-warm-up", daemon=True)
    thread.start()
    return thread


def _opening(codec: Codec, stops: tuple[str, ...], min_tokens: int, include: bool) -> Stream:
    """A stream with these stop parameters and no prompt, kept so that requests opened alike
    share its tables (:func:`~puredetok.stops.open_like`).
    """

    def make() -> Stream:
        rules = StopRules(stop=stops, min_tokens=min_tokens, include_stop_str_in_output=include)
        return open_stream(codec, rules)

    return _openings.get(codec, (stops, min_tokens, include), make)


def _plain(tokenizer: object) -> object:
    """The tokenizer whose decode vLLM's own one does, to build its codec from.

    ``LLM`` and ``AsyncLLM`` hand their ``OutputProcessor`` a Hugging Face tokenizer made thread
    safe by vLLM's renderer (``maybe_make_thread_pool``): its class becomes a subclass of its
    own class and of ``ThreadSafeHFTokenizerMixin`` whose ``decode`` (and the other public
    methods) call a deep copy of the same tokenizer, so it decodes as that class does. puredetok
    refuses a class that overrides ``decode``, so the codec is built on the same state under the
    class it had before. Anything else is returned as it is.
    """
    try:
        from vllm.tokenizers.hf import ThreadSafeHFTokenizerMixin
    except ImportError:  # another vLLM: then no pool is known
        return tokenizer
    cls = type(tokenizer)
    if not isinstance(tokenizer, ThreadSafeHFTokenizerMixin) or not cls.__name__.startswith("TokenizerPool"):
        return tokenizer
    base = cls.__bases__[0]
    if issubclass(base, ThreadSafeHFTokenizerMixin) or not hasattr(tokenizer, "__dict__"):
        return tokenizer
    plain: Any = object.__new__(base)
    plain.__dict__.update(tokenizer.__dict__)
    return plain


def _build(tokenizer: Any, **options: Any) -> Codec:
    """The plugin's codecs are built from :func:`_plain` of the tokenizer vLLM hands it."""
    plain: Any = _plain(tokenizer)
    return codec_for(plain, **options)


_CODECS = CodecCache(build=_build)
"""The plugin's codecs, for both its hooks (the ``OutputProcessor``'s and the derender's)."""


def _prompt_ids(request: Any) -> list[int]:
    """A request's prompt ids, a new list of ints: vLLM's front end hands the ``OutputProcessor``
    a list, but from 0.34 on ``EngineCoreRequest`` also carries them as an int32 NumPy array (as it
    is sent to the engine core), whose truth value is an error and whose items are not ``int``.
    """
    ids = request.prompt_token_ids
    if ids is None:
        return []
    return list(ids) if isinstance(ids, list) else [int(i) for i in ids]


class PuredetokDetokenizer:
    """A request's detokenizer for vLLM's ``OutputProcessor``: the interface of vLLM's
    ``IncrementalDetokenizer`` (``update``, ``get_next_output_text``, ``output_token_ids``,
    ``num_output_tokens``) over a puredetok stream.

    ``update`` decodes the new ids and checks the stop strings, returning the one that matched;
    ``get_next_output_text`` gives the text that is final (only what could still start a stop
    string is held back), the new part or all of it. The engine core's own stops (stop ids, EOS,
    ``max_tokens``) come in as ``stop_terminated`` and the ``finished`` flag. If anything fails,
    the request goes on with vLLM's own detokenizer from where it was (logged once).
    """

    def __init__(self, codec: Codec, request: Any, make_fallback: Callable[[], Any]) -> None:
        params = request.sampling_params
        stop = params.stop
        stops = () if not stop else (stop,) if isinstance(stop, str) else tuple(stop)
        self._include = bool(params.include_stop_str_in_output)
        self._stops = bool(stops)
        self._opening = _opening(codec, stops, params.min_tokens or 0, self._include)
        self._request = request
        self._make_fallback = make_fallback
        self._fallback: Any = None
        self._prompt_ids: list[int] = _prompt_ids(request)
        self._context: list[int] | None = None
        self._stream: Stream = open_like(self._opening, self._prompt_ids)
        limit = params.max_tokens
        self._last = limit if isinstance(limit, int) and not request.resumable else 1 << 62
        """The engine core ends the request after this many ids (its ``max_tokens``)."""
        self._fast_until = self._last - 1
        """One id at a time takes the short path while fewer ids than this came (the last id, a
        closed or resumed stream and a fallback take the careful one: then it is -1)."""
        self._closed = False
        self._pending = ""
        self._text = ""
        self._delivered = 0
        """How many characters the deltas returned so far held (what a client has of the text)."""
        self._skip_chars = 0
        self.token_ids: list[int] = []

    @property
    def output_token_ids(self) -> list[int]:
        """The ids generated so far (after a matched stop string, those up to its last token)."""
        if self._fallback is not None:
            return list(self._fallback.output_token_ids)
        return self.token_ids

    def num_output_tokens(self) -> int:
        """How many ids were generated (see :attr:`output_token_ids`)."""
        return len(self.token_ids)

    def update(self, new_token_ids: list[int], stop_terminated: bool) -> str | None:
        """Decode the new ids and check the stop strings: the matched stop string, or None. The
        last id is not decoded when the engine core stopped on it (``stop_terminated``) unless
        ``include_stop_str_in_output``; ids after the one that completes a stop string are dropped.
        """
        if not stop_terminated and len(new_token_ids) == 1 and len(self.token_ids) < self._fast_until:
            token_id = new_token_ids[0]
            old = self._stream
            try:
                stream, text = advance(old, token_id)
            except Exception:  # noqa: BLE001 - the careful path decides
                return self._update_guarded(new_token_ids, stop_terminated)
            self.token_ids.append(token_id)
            if text:
                self._pending += text
            if stream is not old:  # a stream returned as it was has not ended
                self._stream = stream
                if self._stops:
                    reason = stream.finish_reason
                    if reason is not None:
                        return reason.matched  # type: ignore[return-value]  # only stop strings end it
            return None
        return self._update_guarded(new_token_ids, stop_terminated)

    def get_next_output_text(self, finished: bool, delta: bool) -> str:
        """The text to send: the new part since the last call if ``delta``, else all of it;
        ``finished`` flushes everything still held (the engine ended the request).
        """
        if finished and not self._closed:
            before = self._stream
            try:
                self._stream, tail = close(before)
                reason = self._stream.finish_reason
                if not before.finished and reason is not None and isinstance(reason.matched, str):
                    # The engine ended the request on its own reason (an abort, the context
                    # limit): a stop string only this flush completes can no longer be reported,
                    # so the text is sent whole, the exact text of a request that ended so.
                    tail = before.held + finish(before.decode)
            except Exception:  # noqa: BLE001 - the request goes on with vLLM's own detokenizer
                self._fall_back("get_next_output_text")
                return self.get_next_output_text(finished, delta)
            self._closed = True
            self._fast_until = -1
            self._pending += tail
        text = self._pending
        if text:
            self._pending = ""
        if delta:
            self._delivered += len(text)
            return text
        if text:
            self._text += text
        return self._text

    def _update_guarded(self, new_token_ids: list[int], stop_terminated: bool) -> str | None:
        kept = len(self.token_ids)
        try:
            return self._update(new_token_ids, stop_terminated)
        except Exception:  # noqa: BLE001 - the request goes on with vLLM's own detokenizer
            del self.token_ids[kept:]  # the fallback is fed the ids before these
            self._fall_back("update")
            return self.update(new_token_ids, stop_terminated)

    def _update(self, new_token_ids: list[int], stop_terminated: bool) -> str | None:
        if not new_token_ids:
            return None
        if self._closed:  # a resumable request's next input chunk: continue after all of it
            self._reopen()
        stream = self._stream
        ids = new_token_ids[:-1] if stop_terminated and not self._include else new_token_ids
        for index, token_id in enumerate(ids):
            if stream.finished:
                break
            try:
                stream, text = advance(stream, token_id)
            except InvalidTokenError:  # not an id at all (negative, or past 2**32): vLLM decodes nothing
                _log_once("invalid id", "puredetok: id %r decodes to nothing, as in vLLM", token_id)
                continue
            self._pending += text
            reason = stream.finish_reason
            if reason is not None and isinstance(reason.matched, str):
                self._stream = stream
                self._extend(new_token_ids[: index + 1])
                return reason.matched
        self._stream = stream
        self._extend(new_token_ids)
        if stop_terminated or len(self.token_ids) >= self._last:
            # The engine core ends the request with these ids: flush now, so that a stop string
            # the flushed text completes is reported as one.
            self._stream, tail = close(stream)
            self._pending += tail
            self._closed = True
            self._fast_until = -1
            reason = self._stream.finish_reason
            if reason is not None and reason.kind == "stop" and isinstance(reason.matched, str):
                if ids is not new_token_ids:  # the stop id, never decoded, completed nothing
                    del self.token_ids[-1]
                    if self._context is not None:
                        del self._context[-1]
                return reason.matched
        return None

    def _extend(self, ids: Sequence[int]) -> None:
        self.token_ids.extend(ids)
        if self._context is not None:
            self._context.extend(ids)

    def _reopen(self) -> None:
        """The context of the next chunk: the prompt so far, every output, the new prompt ids."""
        if self._context is None:
            self._context = [*self._prompt_ids, *self.token_ids]
        prompt = _prompt_ids(self._request)
        self._context.extend(prompt[len(self._prompt_ids) :])
        self._prompt_ids = prompt
        self._stream = open_like(self._opening, self._context)
        self._closed = False

    def _fall_back(self, where: str) -> None:
        """Hand the request to vLLM's own detokenizer, fed the ids so far; the text the deltas
        already returned is not sent again (its length is skipped from the fallback's deltas:
        what the client has, whatever part of a batch of ids was decoded before the failure).
        """
        message = "puredetok: %s failed; this request goes on with vLLM's own detokenizer"
        _log_once(f"failure {where}", message, where, error=True)
        fallback = self._make_fallback()
        if self.token_ids:
            fallback.update(list(self.token_ids), False)
        self._fallback = fallback
        self._skip_chars = self._delivered
        self._pending = ""
        self._fast_until = -1
        self.update = fallback.update  # type: ignore[method-assign]
        self.num_output_tokens = fallback.num_output_tokens  # type: ignore[method-assign]
        self.get_next_output_text = self._fallback_text  # type: ignore[method-assign]

    def _fallback_text(self, finished: bool, delta: bool) -> str:
        text: str = self._fallback.get_next_output_text(finished, delta)
        if delta and self._skip_chars:
            skip = min(self._skip_chars, len(text))
            self._skip_chars -= skip
            text = text[skip:]
        return text


@functools.cache
def detokenizer_class() -> type[PuredetokDetokenizer]:
    """:class:`PuredetokDetokenizer` as a subclass of vLLM's ``IncrementalDetokenizer`` (made
    once, when vLLM is there).
    """
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    return type(
        "PuredetokIncrementalDetokenizer",
        (PuredetokDetokenizer, IncrementalDetokenizer),
        {"__doc__": PuredetokDetokenizer.__doc__, "__module__": __name__},
    )


def _make(original: Callable[[Any, Any], Any], tokenizer: Any, request: Any) -> Any:
    params = request.sampling_params
    if tokenizer is None or params is None or request.prompt_embeds is not None:
        return None
    codec = codec_of(tokenizer, bool(params.skip_special_tokens), bool(params.spaces_between_special_tokens))
    if codec is None:
        return None
    return detokenizer_class()(codec, request, lambda: original(tokenizer, request))


HOOKED = frozenset(
    {"from_new_request", "update", "get_next_output_text", "output_token_ids", "num_output_tokens"}
)
"""The public members of vLLM's ``IncrementalDetokenizer`` the plugin hooks or implements: a vLLM
whose class has others (or lacks one) is not the one it was made for, and keeps its own detokenizer."""


def unfit(detokenizer: type, processor: type) -> str | None:
    """Why vLLM's ``IncrementalDetokenizer`` and ``OutputProcessor`` classes are not the ones the
    plugin was made for, or None when they are: the members of :data:`HOOKED` and no other public
    ones, ``from_new_request(tokenizer, request)`` a classmethod, ``output_token_ids`` a property,
    the methods vLLM calls taking the parameters the plugin's take, an ``OutputProcessor.__init__``.
    """
    members = {name for name in vars(detokenizer) if not name.startswith("_")}
    if members != HOOKED:
        new, gone = sorted(members - HOOKED), sorted(HOOKED - members)
        return "IncrementalDetokenizer " + "; ".join(
            part
            for part in (
                f"has {', '.join(new)}, which the plugin does not implement" if new else "",
                f"lacks {', '.join(gone)}" if gone else "",
            )
            if part
        )
    method = vars(detokenizer)["from_new_request"]
    if not isinstance(method, classmethod):
        return "IncrementalDetokenizer.from_new_request is not a classmethod"
    if not isinstance(vars(detokenizer)["output_token_ids"], property):
        return "IncrementalDetokenizer.output_token_ids is not a property"
    # vLLM calls these with its own parameters: the plugin's must be the same.
    expected = {"from_new_request": ["tokenizer", "request"]} | {
        name: parameters(vars(PuredetokDetokenizer)[name])
        for name in ("update", "get_next_output_text", "num_output_tokens")
    }
    for name, wanted in expected.items():
        taken = parameters(vars(detokenizer)[name])
        if taken is None:
            return f"IncrementalDetokenizer.{name} is not a method"
        if taken != wanted:
            return (
                f"IncrementalDetokenizer.{name} takes ({', '.join(taken)}), not ({', '.join(wanted or ())})"
            )
    if "__init__" not in vars(processor):
        return "OutputProcessor has no __init__ of its own"
    return None


def register() -> None:
    """The ``vllm.general_plugins`` entry point: make vLLM's ``IncrementalDetokenizer.from_new_request``
    hand out puredetok's detokenizer, and vLLM's derender decode with puredetok (when vLLM imports
    it; idempotent; nothing happens when ``PUREDETOK_VLLM`` is off).

    It never raises (vLLM calls its plugins unguarded, so an error here would stop vLLM): a vLLM
    whose classes are not the ones the plugin was made for (:func:`unfit`, or a module that moved)
    is left as it is, with a warning naming why.
    """
    if not enabled():
        _LOGGER.info("puredetok: off (%s=%s)", ENABLE_VARIABLE, os.environ.get(ENABLE_VARIABLE))
        return
    _vllm_derender.register(_vllm_derender.Plugin(codec_of, _LOGGER, _log_once))
    try:
        from vllm.v1.engine.detokenizer import IncrementalDetokenizer
        from vllm.v1.engine.output_processor import OutputProcessor

        why = unfit(IncrementalDetokenizer, OutputProcessor)
    except Exception as error:  # noqa: BLE001 - never break the engine
        why = f"{type(error).__name__}: {error}"
    if why is None:
        try:
            _patch(IncrementalDetokenizer)
        except Exception as error:  # noqa: BLE001 - never break the engine
            why = f"{type(error).__name__}: {error}"
            unregister()
    if why is not None:
        _LOGGER.warning(
            "puredetok: not used with this vLLM (%s): %s; vLLM's own detokenizer decodes",
            installed("vllm"),
            why,
        )
        return
    using = "vLLM's OutputProcessor detokenizes with puredetok"
    fits = "its classes are the ones the plugin was made for"
    announce(_LOGGER, "vllm", TESTED_VERSIONS, using, fits, ENABLE_VARIABLE)


def _patch(detokenizer: Any) -> None:
    with _lock:
        if _original:
            return
        raw = detokenizer.__dict__["from_new_request"]
        _original.append(raw)
    original = raw.__get__(None, detokenizer)

    def from_new_request(cls: Any, tokenizer: Any, request: Any) -> Any:
        try:
            made = _make(original, tokenizer, request)
        except Exception:  # noqa: BLE001 - never break the engine
            _log_once(
                "from_new_request",
                "puredetok: opening a request failed; vLLM's own detokenizer is used",
                error=True,
            )
            made = None
        return made if made is not None else original(tokenizer, request)

    from_new_request.puredetok = True  # type: ignore[attr-defined]
    detokenizer.from_new_request = classmethod(from_new_request)
    _hook_output_processor()


def _hook_output_processor() -> None:
    """Make vLLM's ``OutputProcessor`` start :func:`warm` for its tokenizer when it is made."""
    from vllm.v1.engine.output_processor import OutputProcessor

    with _lock:
        if _original_init:
            return
        init = OutputProcessor.__dict__["__init__"]
        _original_init.append(init)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        tokenizer = getattr(self, "tokenizer", None)
        if tokenizer is not None:
            try:
                warm(tokenizer)
            except Exception:  # noqa: BLE001 - never break the engine
                _log_once("warm start", "puredetok: could not start building codecs in advance", error=True)

    OutputProcessor.__init__ = __init__


def registered() -> bool:
    """Whether :func:`register` has patched vLLM in this process."""
    return bool(_original)


def unregister() -> None:
    """Give vLLM its own ``from_new_request``, ``OutputProcessor.__init__`` and derender back
    (requests already open keep their detokenizer).
    """
    _vllm_derender.unregister()
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer
    from vllm.v1.engine.output_processor import OutputProcessor

    with _lock:
        if _original:
            IncrementalDetokenizer.from_new_request = _original.pop()
        if _original_init:
            OutputProcessor.__init__ = _original_init.pop()
