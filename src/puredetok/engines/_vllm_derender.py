"""The vLLM plugin's hook of vLLM's streaming derender (``vllm/renderers/online_derenderer.py``).

vLLM's derender endpoints (``/v1/completions/derender``, ``/v1/chat/completions/derender``)
turn the ids of a token-only ``/inference/v1/generate`` into text, statelessly: the client sends
back, with each chunk, the ``DerenderStreamState`` the previous call returned, and the server
decodes with ``detokenize_incrementally``. The plugin replaces the one function that decodes
(``OnlineDerenderer._detokenize_delta``, which every path calls: streamed and whole, completion
and chat, with a parser or without) and the one that seeds a state from the prompt
(``_seed_stream_state``), and flushes the end of a request. The rules, which the code follows:

* **The state stays vLLM's.** ``prev_tokens`` are token strings (``convert_ids_to_tokens``),
  ``read_offset`` splits them as vLLM does: the text of ``prev_tokens[:read_offset]`` was sent,
  that of the rest was not. So a state made by vLLM's own code is read as vLLM means it, and one
  made by the plugin is one vLLM's own code can continue.
* **Each call is derived again from the ids.** The strings name their ids one to one (a
  tokenizer whose strings do not is left to vLLM's own code); the call opens a puredetok stream
  after ``prev_tokens[:read_offset]`` (contract C) and steps the rest and the new ids.
* **Text is sent up to the last id after which nothing is held** (the stream's text so far is
  all final). The ids after it are carried as not sent. The new state names a short tail of the
  sent ids after which a stream opens as the stream at that point (the plugin checks it: one id,
  most often), then the ids not sent; ``prefix_offset`` is 0.
* **The end of a request is flushed**: a streamed chunk with a ``finish_reason`` gets the text
  still held; a whole response is decoded to its end.
* **A state is at most** :data:`WINDOW` **strings** (vLLM refuses a longer one): byte-fallback
  runs are held up to :data:`MAX_BYTE_RUN` tokens (the core's cap: exact unless a valid run
  longer than that later turns invalid).

Anything that is not what the plugin was made for (:func:`unfit`), or any failure of the plugin,
leaves vLLM's own code to decode, and says why once; a state naming a string that is not a token
of the tokenizer is a request error (``ValueError``, which vLLM answers with a 400).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, NamedTuple

from puredetok._core import Codec, DecodeState, finish, start, steady, step
from puredetok.engines._cache import IdentityCache
from puredetok.engines._versions import installed, parameters

MODULE = "vllm.renderers.online_derenderer"
"""The module of vLLM's ``OnlineDerenderer``, hooked when it is imported (importing it costs a few
seconds, which the processes that never derender do not pay)."""

WINDOW = 1024
"""The most strings vLLM takes in ``DerenderStreamState.prev_tokens``."""

MAX_BYTE_RUN = 512
"""The longest byte-fallback run held back, so that a state stays within :data:`WINDOW`."""

MAX_VOCABULARIES = 16
"""How many tokenizers' string tables are kept (one per tokenizer; each holds its vocabulary)."""

METHODS = {
    "_detokenize_delta": [
        "tokenizer",
        "delta_token_ids",
        "state",
        "skip_special_tokens",
        "spaces_between_special_tokens",
    ],
    "_decode_output": [
        "tokenizer",
        "token_ids",
        "finish_reason",
        "stop_reason",
        "request",
        "seed_state",
        "skip_special_tokens",
        "spaces_between_special_tokens",
    ],
    "_derender_chat_stream_parsed": [
        "parser_cls",
        "model",
        "generate_chunk",
        "state",
        "chat_request",
        "prompt_tokens",
        "prompt_token_ids",
    ],
    "derender_completion_stream": [
        "model",
        "generate_chunk",
        "state",
        "prompt_tokens",
        "completion_request",
        "prompt_token_ids",
    ],
    "derender_chat_stream": [
        "model",
        "generate_chunk",
        "state",
        "chat_request",
        "prompt_tokens",
        "prompt_token_ids",
    ],
}
"""The methods of ``OnlineDerenderer`` the plugin hooks, with the parameters vLLM calls them with."""

SEED = ["tokenizer", "prompt_token_ids", "skip_special_tokens"]
"""The parameters of ``_seed_stream_state``."""

FIELDS = ("prev_tokens", "prefix_offset", "read_offset", "output_chunk_lens")
"""The fields of ``DerenderStreamState`` the plugin reads or writes."""

_lock = threading.Lock()
_original: dict[str, Any] = {}
_vocabularies: IdentityCache[tuple[_Vocabulary, _Vocabulary] | None] = IdentityCache(MAX_VOCABULARIES)
_plugin: list[Plugin] = []
"""The plugin :func:`register` was given (the last one)."""
_local = threading.local()
"""Per thread: ``flush_at``, the call of ``_detokenize_delta`` that ends a request (1 for the
first) while a whole decode runs in this thread, and ``calls``, how many were made."""


class _Vocabulary:
    """A tokenizer's token strings, which name its ids one to one, for one ``skip_special_tokens``
    (the two share ``pieces`` and ``ids``).
    """

    def __init__(self, pieces: list[str], ids: dict[str, int], skipped: frozenset[int]) -> None:
        self.pieces = pieces
        """Each id's string (``convert_ids_to_tokens``)."""
        self.ids = ids
        """Each string's id."""
        self.skipped = skipped
        """The ids ``convert_ids_to_tokens`` leaves out (the special tokens, when skipping them)."""

    def id_or_none(self, token_id: int) -> int | None:
        """``token_id``, or None for one past the vocabulary (which decodes to nothing)."""
        return token_id if 0 <= token_id < len(self.pieces) else None

    def strings(self, ids: Sequence[int | None]) -> list[str]:
        """The strings vLLM's state holds for ``ids``: ``""`` for None, none for a skipped id."""
        return [self.pieces[i] if i is not None else "" for i in ids if i not in self.skipped]

    def named(self, strings: Sequence[str]) -> list[int | None]:
        """The ids the strings name (None for ``""``); ``ValueError`` for one that names none."""
        found: list[int | None] = []
        for at, piece in enumerate(strings):
            token_id = None if piece == "" else self.ids.get(piece)
            if token_id is None and piece != "":
                raise ValueError(f"invalid stream_state: prev_tokens[{at}] {piece!r} is not a token")
            found.append(token_id)
        return found


def _vocabulary(tokenizer: Any, skip: bool) -> _Vocabulary | None:
    """The string table of ``tokenizer`` for ``skip_special_tokens=skip`` (made once for both
    values, which share it), or None when its strings do not name its ids one to one (then vLLM's
    own code decodes its requests; logged once).
    """
    made = _vocabularies.get(tokenizer, (), lambda: _read_vocabularies(tokenizer))
    return None if made is None else made[skip]


def _read_vocabularies(tokenizer: Any) -> tuple[_Vocabulary, _Vocabulary] | None:
    """The string tables of ``tokenizer`` without and with its special tokens skipped, or None
    (logged) when its strings do not name its ids one to one.
    """
    made, why = None, ""
    try:
        everything = list(range(len(tokenizer)))
        pieces = tokenizer.convert_ids_to_tokens(everything)
        ids = {piece: token_id for token_id, piece in enumerate(pieces) if isinstance(piece, str) and piece}
        if len(ids) != len(pieces):
            why = f"{len(pieces) - len(ids)} of its ids have no string of their own"
        else:
            kept = tokenizer.convert_ids_to_tokens(everything, skip_special_tokens=True)
            special = frozenset(everything) - {ids.get(piece, -1) for piece in kept}
            if len(kept) + len(special) == len(pieces):
                made = (_Vocabulary(pieces, ids, frozenset()), _Vocabulary(pieces, ids, special))
            else:
                why = "convert_ids_to_tokens changes the strings it does not skip"
    except Exception as error:  # noqa: BLE001 - not a tokenizer whose strings the plugin reads
        why = f"{type(error).__name__}: {error}"
    if made is None:
        _log_once(
            f"vocabulary {type(tokenizer).__name__}",
            "puredetok: %s's token strings do not name its ids (%s); vLLM's own derender decodes"
            " its requests",
            type(tokenizer).__name__,
            why,
        )
    return made


class Plugin(NamedTuple):
    """What the vLLM plugin lends this hook (given to :func:`register`, so that this module does
    not import the plugin's): its codecs, its logger, and its way of saying a thing once (a
    warning; with ``error=True``, with the exception being handled).
    """

    codec_of: Callable[[Any, bool, bool, int | None], Codec | None]
    logger: logging.Logger
    log_once: Callable[..., None]


def _log_once(key: str, message: str, *args: object, error: bool = False) -> None:
    _plugin[0].log_once(key, message, *args, error=error)


def _codec(tokenizer: Any, skip: bool, spaces: bool) -> Codec | None:
    """The plugin's exact codec for these options, its byte-fallback runs capped at
    :data:`MAX_BYTE_RUN` (derived from the uncapped one, and kept, by the plugin's codec cache);
    None when puredetok does not model the tokenizer exactly.
    """
    return _plugin[0].codec_of(tokenizer, skip, spaces, MAX_BYTE_RUN)


def _tail(codec: Codec, ids: list[int], target: DecodeState, room: int) -> list[int]:
    """A short tail of ``ids`` after which a stream opens as ``target``: the first of 0, 1, 2, 4,
    ... ids (at most twice the shortest) that does; at most ``room`` ids (past that, the longest
    allowed, and the text may differ; logged once).
    """
    length, most = 0, min(len(ids), room)
    while True:
        tail = ids[len(ids) - length :]
        if start(codec, tail).hold == target.hold:
            return tail
        if length == most:
            break
        length = min(max(2 * length, 1), most)
    _log_once("window", "puredetok: a derender state needs more than %d tokens; its text may differ", WINDOW)
    return ids[len(ids) - room :] if room else []


def _continue(
    codec: Codec,
    vocabulary: _Vocabulary,
    strings: Sequence[str],
    read_offset: int,
    new_ids: Sequence[int],
    last: bool,
) -> tuple[str, list[str], int]:
    """One derender call: the text to send for ``new_ids`` after a state's ``prev_tokens`` and
    ``read_offset``, and the new state's strings and read offset (all of it sent when ``last``).
    """
    window = vocabulary.named(strings)
    if read_offset > len(window):
        raise ValueError(
            f"invalid stream_state: read_offset {read_offset} is past prev_tokens ({len(window)})"
        )
    read = read_offset
    skipped = vocabulary.skipped
    sent = [i for i in window[:read] if i is not None and i not in skipped]
    ids = [*window[read:], *(vocabulary.id_or_none(i) for i in new_ids)]
    stream = start(codec, sent)
    idle = steady(codec)[0]
    texts: list[str] = []
    mark, marked_texts, marked = 0, 0, stream
    for at, token_id in enumerate(ids, 1):
        if token_id is not None and token_id not in skipped:
            stream, text = step(stream, token_id)
            if text:
                texts.append(text)
        if stream.hold is idle or stream.hold == idle or not finish(stream):
            mark, marked_texts, marked = at, len(texts), stream
    if last:
        texts.append(finish(stream))
        mark, marked_texts, marked = len(ids), len(texts), stream
    unsent = ids[mark:]
    done = [i for i in [*sent, *ids[:mark]] if i is not None and i not in skipped]
    head = vocabulary.strings(_tail(codec, done, marked, max(WINDOW - len(vocabulary.strings(unsent)), 0)))
    return "".join(texts[:marked_texts]), [*head, *vocabulary.strings(unsent)], len(head)


def _derive(tokenizer: Any, ids: Sequence[int], state: Any, skip: bool, spaces: bool, last: bool) -> Any:
    """``(text, new_state)`` for vLLM's ``_detokenize_delta``, or None where vLLM's own code
    decodes (a tokenizer not modelled exactly, or whose strings do not name its ids).
    """
    codec = _codec(tokenizer, skip, spaces)
    vocabulary = None if codec is None else _vocabulary(tokenizer, skip)
    if codec is None or vocabulary is None:
        return None
    text, strings, read = _continue(codec, vocabulary, state.prev_tokens, state.read_offset, ids, last)
    return text, state.model_copy(update={"prev_tokens": strings, "prefix_offset": 0, "read_offset": read})


def _flushing() -> bool:
    """Whether this call of ``_detokenize_delta`` ends a whole decode running in this thread."""
    flush_at = getattr(_local, "flush_at", 0)
    if not flush_at:
        return False
    _local.calls += 1
    return bool(_local.calls == flush_at)


def _detokenize_delta(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def detokenize_delta(
        self: Any,
        tokenizer: Any,
        delta_token_ids: list[int],
        state: Any,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> Any:
        if not _original:  # unregistered: an instance made before keeps this method in its wrappers
            return original(
                self, tokenizer, delta_token_ids, state, skip_special_tokens, spaces_between_special_tokens
            )
        last = _flushing()
        try:
            derived = _derive(
                tokenizer, delta_token_ids, state, skip_special_tokens, spaces_between_special_tokens, last
            )
        except ValueError as error:
            if str(error).startswith("invalid stream_state"):
                raise  # the client's state names no token: the request's error
            derived = _failed("_detokenize_delta")
        except Exception:  # noqa: BLE001 - vLLM's own code decodes this call
            derived = _failed("_detokenize_delta")
        if derived is None:
            return original(
                self, tokenizer, delta_token_ids, state, skip_special_tokens, spaces_between_special_tokens
            )
        return derived

    detokenize_delta.puredetok = True  # type: ignore[attr-defined]
    return detokenize_delta


def _failed(where: str) -> Any:
    """Say once that ``where`` failed (vLLM's own derender decodes instead); None, the plugin's
    answer where it has none.
    """
    _log_once(f"derender {where}", "puredetok: %s failed; vLLM's own derender decodes it", where, error=True)
    return None


def _seed_stream_state(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def seed_stream_state(
        tokenizer: Any, prompt_token_ids: list[int] | None, skip_special_tokens: bool
    ) -> Any:
        seeded = original(tokenizer, prompt_token_ids, skip_special_tokens)
        if not prompt_token_ids:
            return seeded
        try:
            strings = _seed(tokenizer, prompt_token_ids, skip_special_tokens)
        except Exception:  # noqa: BLE001 - vLLM's seed is used
            strings = _failed("_seed_stream_state")
        if strings is None:
            return seeded
        return seeded.model_copy(
            update={"prev_tokens": strings, "prefix_offset": 0, "read_offset": len(strings)}
        )

    seed_stream_state.puredetok = True  # type: ignore[attr-defined]
    return seed_stream_state


def _seed(tokenizer: Any, prompt: list[int], skip: bool) -> list[str] | None:
    """The strings of the shortest tail of ``prompt`` after which a stream opens as after the
    whole prompt, for both ``spaces_between_special_tokens`` (the seed does not know which).
    """
    vocabulary = _vocabulary(tokenizer, skip)
    codecs = [_codec(tokenizer, skip, spaces) for spaces in (True, False)]
    if vocabulary is None or None in codecs:
        return None
    ids = [i for i in prompt if i not in vocabulary.skipped]
    length = max(len(_tail(codec, ids, start(codec, ids), WINDOW)) for codec in codecs if codec is not None)
    return vocabulary.strings(ids[len(ids) - length :] if length else [])


def _decode_params(online: Any, request: Any) -> tuple[bool, bool]:
    module = sys.modules[MODULE]
    return module._decode_params(online.renderer.get_tokenizer(), request)  # type: ignore[no-any-return]


def _stream(original: Callable[..., Any], request_field: str) -> Callable[..., Any]:
    """``derender_completion_stream`` or ``derender_chat_stream`` with the end of a request
    flushed: the text still held goes out with the chunk that has a ``finish_reason``.
    """

    @functools.wraps(original)
    async def derender_stream(self: Any, model: str, generate_chunk: Any, *args: Any, **kwargs: Any) -> Any:
        chunk, state = await original(self, model, generate_chunk, *args, **kwargs)
        choices = generate_chunk.choices
        if not choices or choices[0].finish_reason is None or self.parser is not None:
            return chunk, state
        try:
            bound = inspect.signature(original).bind(self, model, generate_chunk, *args, **kwargs)
            skip, spaces = _decode_params(self, bound.arguments.get(request_field))
            derived = _derive(self.renderer.get_tokenizer(), [], state, skip, spaces, last=True)
            if derived is not None:
                tail, state = derived
                chunk = _with_text(chunk, tail) if tail else chunk
        except ValueError as error:
            if str(error).startswith("invalid stream_state"):
                raise
            _failed("the final flush")
        except Exception:  # noqa: BLE001 - the chunk goes out as vLLM made it
            _failed("the final flush")
        return chunk, state

    derender_stream.puredetok = True  # type: ignore[attr-defined]
    return derender_stream


def _with_text(chunk: Any, tail: str) -> Any:
    """``chunk`` with ``tail`` after its one choice's text (a completion's ``text``, a chat
    delta's ``content``).
    """
    [choice] = chunk.choices
    if hasattr(choice, "delta"):
        delta = choice.delta.model_copy(update={"content": (choice.delta.content or "") + tail})
        choice = choice.model_copy(update={"delta": delta})
    else:
        choice = choice.model_copy(update={"text": choice.text + tail})
    return chunk.model_copy(update={"choices": [choice]})


def _whole(original: Callable[..., Any], flush_at: Callable[..., int]) -> Callable[..., Any]:
    """A method that decodes a whole request in this thread (``_decode_output``, or a parsed
    chat stream's replay and chunk), with the ``_detokenize_delta`` call that ends it flushed.
    """

    @functools.wraps(original)
    def whole(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _original:  # unregistered (see _detokenize_delta)
            return original(self, *args, **kwargs)
        try:
            at = flush_at(inspect.signature(original).bind(self, *args, **kwargs).arguments)
        except Exception:  # noqa: BLE001 - decoded without the flush
            _failed(f"{original.__name__}'s flush")
            at = 0
        outer = getattr(_local, "flush_at", 0), getattr(_local, "calls", 0)
        _local.flush_at, _local.calls = at, 0
        try:
            return original(self, *args, **kwargs)
        finally:
            made = _local.calls
            _local.flush_at, _local.calls = outer
            if at and made < at:
                _log_once(
                    f"{original.__name__} calls",
                    "puredetok: vLLM's %s decoded in %d calls, not %d: its last text was not flushed",
                    original.__name__,
                    made,
                    at,
                )

    whole.puredetok = True  # type: ignore[attr-defined]
    return whole


def _decode_output_end(arguments: dict[str, Any]) -> int:
    """``_decode_output`` decodes the ids before ``min_tokens``, then the rest: the second call ends it."""
    return 2


def _parsed_stream_end(arguments: dict[str, Any]) -> int:
    """A parsed chat stream replays each earlier chunk, then decodes this one if it has ids: the
    call after the replay ends the request when this chunk has a ``finish_reason``.
    """
    choices = arguments["generate_chunk"].choices
    if not choices or choices[0].finish_reason is None or not choices[0].token_ids:
        return 0
    return len(arguments["state"].output_chunk_lens) + 1


def unfit(module: ModuleType) -> str | None:
    """Why vLLM's derender module is not the one the plugin was made for, or None when it is:
    ``OnlineDerenderer`` with the methods of :data:`METHODS` taking those parameters,
    ``_seed_stream_state`` and ``_decode_params``, a ``DerenderStreamState`` with :data:`FIELDS`.
    """
    online = getattr(module, "OnlineDerenderer", None)
    if not inspect.isclass(online):
        return "it has no OnlineDerenderer"
    for name, wanted in METHODS.items():
        taken = parameters(vars(online).get(name))
        if taken is None:
            return f"OnlineDerenderer has no method {name}"
        if taken != wanted:
            return f"OnlineDerenderer.{name} takes ({', '.join(taken)}), not ({', '.join(wanted)})"
    seed = parameters(getattr(module, "_seed_stream_state", None))
    if seed != SEED:
        return f"_seed_stream_state takes ({', '.join(seed or ())}), not ({', '.join(SEED)})"
    if parameters(getattr(module, "_decode_params", None)) is None:
        return "it has no _decode_params"
    state = getattr(module, "DerenderStreamState", None)
    fields = getattr(state, "model_fields", {})
    missing = [name for name in FIELDS if name not in fields]
    if missing:
        return f"DerenderStreamState lacks {', '.join(missing)}"
    return None


def _patch(module: ModuleType) -> None:
    """Hook the module's derender (guarded: on a module the plugin was not made for, or a patch
    that fails half-way, vLLM's own code is left, and the log says why).
    """
    try:
        why = unfit(module)
        if why is None:
            _hook(module)
    except Exception as error:  # noqa: BLE001 - never break the import
        why = f"{type(error).__name__}: {error}"
        _restore(module)
    if why is not None:
        _plugin[0].logger.warning(
            "puredetok: vLLM's derender not hooked (%s): %s; vLLM's own code decodes it",
            installed("vllm"),
            why,
        )


def _hook(module: ModuleType) -> None:
    online = module.OnlineDerenderer
    with _lock:
        if _original:
            return
        _original.update({name: vars(online)[name] for name in METHODS})
        _original["_seed_stream_state"] = vars(module)["_seed_stream_state"]
    online._detokenize_delta = _detokenize_delta(_original["_detokenize_delta"])
    online._decode_output = _whole(_original["_decode_output"], _decode_output_end)
    online._derender_chat_stream_parsed = _whole(
        _original["_derender_chat_stream_parsed"], _parsed_stream_end
    )
    online.derender_completion_stream = _stream(_original["derender_completion_stream"], "completion_request")
    online.derender_chat_stream = _stream(_original["derender_chat_stream"], "chat_request")
    vars(module)["_seed_stream_state"] = _seed_stream_state(_original["_seed_stream_state"])


def _restore(module: ModuleType) -> None:
    with _lock:
        originals = dict(_original)
        _original.clear()
    for name, value in originals.items():
        if name == "_seed_stream_state":
            setattr(module, name, value)
        else:
            setattr(module.OnlineDerenderer, name, value)


class _Loader(importlib.abc.Loader):
    """A module's own loader, then the plugin's patch of it."""

    def __init__(self, loader: importlib.abc.Loader, patch: Callable[[ModuleType], None]) -> None:
        self.loader = loader
        self.patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.patch(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds :data:`MODULE` as the other finders do, with :class:`_Loader` around its loader."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, _patch)
                return spec
        return None


_finder = _Finder()


def register(plugin: Plugin) -> None:
    """Hook vLLM's derender, with what ``plugin`` lends: now if its module is imported, else when
    it is (never raises).
    """
    _plugin[:] = [plugin]
    try:
        module = sys.modules.get(MODULE)
        if module is not None:
            _patch(module)
        elif _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
    except Exception:  # noqa: BLE001 - never break the engine
        _failed("register")


def registered() -> bool:
    """Whether vLLM's derender is hooked in this process."""
    return bool(_original)


def unregister() -> None:
    """Give vLLM its own derender back (and hook no module imported later)."""
    while _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    module = sys.modules.get(MODULE)
    if module is not None:
        _restore(module)
