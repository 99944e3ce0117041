"""puredetok inside SGLang's detokenizer process, through SGLang's own plugin entry point.

SGLang runs every entry point of the group ``sglang.srt.plugins`` at the start of each of its
processes (``sglang.srt.plugins.load_plugins``, which ``run_detokenizer_process`` calls first).
puredetok's entry point, :func:`register`, hooks two methods of SGLang's ``DetokenizerManager``
with SGLang's ``HookRegistry``:

* ``init_running_status`` (after it): the manager gets a :class:`SGLangDetokenizer` over its own
  tokenizer, with the codec of SGLang's default options built then, not on the first request;
* ``_decode_batch_token_id_output`` (around it): the step that turns a ``BatchTokenIDOutput``
  into the ``output_strs`` of its ``BatchStrOutput``. Everything else the manager does (its
  sockets, the other message types, the ``BatchStrOutput`` it builds, beam search) stays SGLang's.

Off with SGLang's own allow-list (``SGLANG_PLUGINS`` naming other plugins only) or with
``PUREDETOK_SGLANG=0``. An SGLang whose detokenizer process loads no plugins (0.5.21 and older:
:func:`unloaded`) or whose detokenizer is not the one the plugin was made for (:func:`unfit`) keeps
its own decode, with a warning naming its version and why. A request whose decode options have no
exact codec (or any failure of puredetok on it) is decoded by SGLang's own code, logged once: the
plugin never fails the engine.
"""

from __future__ import annotations

__all__ = [
    "DECODE_TARGET",
    "INIT_TARGET",
    "OFF_VALUES",
    "OFF_VARIABLE",
    "SGLangDetokenizer",
    "TESTED_VERSIONS",
    "enabled",
    "register",
    "unfit",
    "unloaded",
]

import dataclasses
import inspect
import logging
import os
from collections.abc import Callable, Hashable, MutableMapping, Sequence
from types import SimpleNamespace
from typing import Any

from puredetok._core import Codec, feed_hold, finish_hold, start, steady, step_hold
from puredetok.engines._versions import announce, installed
from puredetok.errors import InvalidTokenError
from puredetok.serving._codec_cache import CodecCache, exact_or_why, plain_options

_logger = logging.getLogger(__name__)

OFF_VARIABLE = "PUREDETOK_SGLANG"
"""The environment variable that turns the plugin off (one of :data:`OFF_VALUES`)."""

OFF_VALUES = frozenset({"0", "off", "false", "no"})
"""The values of :data:`OFF_VARIABLE` that turn the plugin off (case does not matter)."""

TESTED_VERSIONS = ("0.5.22", "0.5.23")
"""The SGLang versions in whose own detokenizer process the plugin was tested decoding
(``engine_tests/sglang``, see docs/engines/sglang.md). On another one that loads it
(:func:`unloaded`) and whose detokenizer is the one it was made for (:func:`unfit`) it decodes all
the same, and says in a warning that this version was not tested."""

_MANAGER = "sglang.srt.managers.detokenizer_manager.DetokenizerManager"
DECODE_TARGET = f"{_MANAGER}._decode_batch_token_id_output"
"""The method puredetok takes over: ``BatchTokenIDOutput`` in, the list of output strings out."""
INIT_TARGET = f"{_MANAGER}.init_running_status"
"""The method after which a manager gets its :class:`SGLangDetokenizer`."""

_ATTRIBUTE = "puredetok_detokenizer"
"""The attribute of a ``DetokenizerManager`` that holds its :class:`SGLangDetokenizer` (or None)."""

_TrimStop = Callable[[Any, Any, bool], Any]
"""SGLang's ``DetokenizerManager.trim_matched_stop(output, finished_reason, no_stop_trim)``."""

_Handover = Callable[[Hashable, str, str, Sequence[int], int], None]
"""Gives a live request to SGLang's own detokenizer: ``(rid, settled text, text sent, ids,
context)``: the text of the ids up to ``context`` (SGLang's ``read_offset``) in ``ids``, all the
text sent so far (some of it may come from the ids after ``context``), the ids."""


def enabled() -> bool:
    """Whether :data:`OFF_VARIABLE` leaves the plugin on."""
    return os.environ.get(OFF_VARIABLE, "").strip().lower() not in OFF_VALUES


def register() -> None:
    """The ``sglang.srt.plugins`` entry point: hook SGLang's ``DetokenizerManager`` (see the module).

    Does nothing (and says so in the log) when :data:`OFF_VARIABLE` turns the plugin off, or (with
    a warning) in an SGLang whose detokenizer process would not run it (:func:`unloaded`).
    """
    if not enabled():
        _logger.info("puredetok: plugin off (%s=%s)", OFF_VARIABLE, os.environ[OFF_VARIABLE])
        return
    why = unloaded()
    if why is not None:
        _not_used(why)
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(INIT_TARGET, _after_init, HookType.AFTER)
    HookRegistry.register(DECODE_TARGET, _around_decode, HookType.AROUND)


def _not_used(why: str) -> None:
    _logger.warning(
        "puredetok: not used with this SGLang (%s): %s; SGLang's own decodes", installed("sglang"), why
    )


def _after_init(result: object, manager: Any, *args: object, **kwargs: object) -> None:
    """After ``init_running_status``: give the manager its detokenizer (None: SGLang's own)."""
    setattr(manager, _ATTRIBUTE, _make(manager))


def _make(manager: Any) -> SGLangDetokenizer | None:
    """A detokenizer over the manager's tokenizer, or None (SGLang's own) if it has none or
    puredetok cannot be set up on it (logged).
    """
    tokenizer = getattr(manager, "tokenizer", None)
    if tokenizer is None:
        return None
    why = unfit(manager)
    if why is not None:
        _not_used(why)
        return None
    try:
        detokenizer = SGLangDetokenizer(tokenizer, manager.trim_matched_stop)
        detokenizer.codec(True, True)  # SGLang's default options: the first request should not wait
    except Exception:
        _logger.exception("puredetok: not used in this detokenizer process (SGLang's own decodes)")
        return None
    using = "decoding in SGLang's detokenizer process"
    fits = "its detokenizer is the one the plugin was made for"
    announce(_logger, "sglang", TESTED_VERSIONS, using, fits, OFF_VARIABLE)
    return detokenizer


_STATUS = ("decoded_text", "decode_ids", "surr_offset", "read_offset", "sent_offset")
"""The fields of SGLang's ``DecodeStatus`` that a hand-over (a request given back to SGLang's own
detokenizer) sets."""


def unfit(manager: Any) -> str | None:
    """Why SGLang's detokenizer (its ``DetokenizerManager`` ``manager``, the messages it decodes,
    its ``DecodeStatus``) is not the one the plugin was made for, or None when it is: another
    SGLang version's detokenizer keeps its own decode.
    """
    try:
        from sglang.srt.managers.detokenizer_manager import DecodeStatus
        from sglang.srt.managers.io_struct import BatchTokenIDOutput
    except Exception as error:  # noqa: BLE001 - a module that moved
        return f"{type(error).__name__}: {error}"
    fields = set(getattr(BatchTokenIDOutput, "__struct_fields__", ()))
    missing = [name for name in _FIELDS if name not in fields]
    if missing:
        return f"BatchTokenIDOutput has no {', '.join(missing)}"
    status = (
        {field.name for field in dataclasses.fields(DecodeStatus)}
        if dataclasses.is_dataclass(DecodeStatus)
        else set()
    )
    missing = [name for name in _STATUS if name not in status]
    if missing:
        return f"DecodeStatus has no {', '.join(missing)}"
    missing = [name for name in ("decode_status", "trim_matched_stop") if not hasattr(manager, name)]
    if missing:
        return f"DetokenizerManager has no {', '.join(missing)}"
    return None


def unloaded() -> str | None:
    """Why SGLang's detokenizer process would never run the plugin, or None when it does: SGLang
    starts it with ``run_detokenizer_process``, which loads SGLang's plugins (``load_plugins``)
    from 0.5.22 on; before, the entry point ran in SGLang's other processes only.
    """
    try:
        from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
    except Exception as error:  # noqa: BLE001 - a module that moved
        return f"{type(error).__name__}: {error}"
    code = getattr(inspect.unwrap(run_detokenizer_process), "__code__", None)
    if "load_plugins" not in getattr(code, "co_names", ()):
        return "its detokenizer process loads no plugins (run_detokenizer_process calls no load_plugins)"
    return None


def _around_decode(original: Callable[..., list[str]], manager: Any, recv_obj: Any) -> list[str]:
    """Around ``_decode_batch_token_id_output``: puredetok decodes, SGLang's own for the rest."""
    if not hasattr(manager, _ATTRIBUTE):  # a subclass that did not run init_running_status
        setattr(manager, _ATTRIBUTE, _make(manager))
    detokenizer: SGLangDetokenizer | None = getattr(manager, _ATTRIBUTE)
    if detokenizer is None:
        return original(manager, recv_obj)

    def own(batch: Any) -> list[str]:
        return original(manager, batch)

    def handover(rid: Hashable, settled: str, sent: str, ids: Sequence[int], context: int) -> None:
        from sglang.srt.managers.detokenizer_manager import DecodeStatus

        status = DecodeStatus(decoded_text=settled, decode_ids=list(ids), surr_offset=0, read_offset=context)
        status.sent_offset = len(sent)
        manager.decode_status[rid] = status

    return detokenizer.decode(recv_obj, own, manager.decode_status, handover)


_FIELDS = (
    "rids",
    "decoded_texts",
    "decode_ids",
    "read_offsets",
    "finished_reasons",
    "no_stop_trim",
    "skip_special_tokens",
    "spaces_between_special_tokens",
)
"""The fields of a ``BatchTokenIDOutput`` that SGLang's decode step reads."""


class _Live:
    """A live request (mutated per token, so slotted rather than frozen): its ``hold``, the
    codec's ``idle`` hold and ``fast`` texts (:func:`~puredetok._core.steady`), its vocabulary
    ``size`` and ``codec``, the texts ``sent``; then, kept off the fast path, what SGLang's own
    detokenizer needs to go on if puredetok fails on the request: the ``ids`` since the hold was
    last idle after ``context`` ids before them, and how many of the sent texts came before those
    ids (``settled``; the rest were sent from them).
    """

    __slots__ = ("hold", "idle", "fast", "size", "codec", "sent", "ids", "context", "settled")

    def __init__(
        self,
        hold: Hashable,
        idle: Hashable,
        fast: Sequence[str | None],
        codec: Codec,
        sent: list[str],
        ids: list[int],
        context: int,
        settled: int,
    ) -> None:
        self.hold, self.idle, self.fast, self.size = hold, idle, fast, codec.vocab_size
        self.codec, self.sent, self.ids, self.context, self.settled = codec, sent, ids, context, settled


class SGLangDetokenizer:
    """The decode step of SGLang's detokenizer, on puredetok: one stream per live request.

    A request opens with its first message: ``decode_ids`` is a window, the last few prompt ids
    (up to ``read_offsets``) then the output's first ids; the prompt part primes the stream
    (contract C: what the prompt showed is not sent again), and ``decoded_texts`` (text already
    decoded, empty from SGLang's scheduler) goes out first. Later messages carry the new ids only.
    A finished request (any ``finished_reasons``: a stop, its length, an abort) gets the rest of
    its text, trimmed at a matched stop string or without its matched stop token as SGLang trims
    (``trim_stop``, SGLang's own ``trim_matched_stop``, so ``no_stop_trim`` and its tool-call
    exceptions hold), and its stream is dropped. A request's codec, per
    ``(skip_special_tokens, spaces_between_special_tokens)`` (one for both values of the second
    when the tokenizer ignores it), comes from ``codecs``, the plugin's codec cache by default
    (built once, shared, bounded: see docs/adapters.md).
    """

    def __init__(self, tokenizer: Any, trim_stop: _TrimStop, codecs: CodecCache | None = None) -> None:
        self.tokenizer = tokenizer
        self.trim_stop = trim_stop
        self.codecs = _CODECS if codecs is None else codecs
        """The codec cache the detokenizer asks for its requests' codecs."""
        self._unmodelled: set[tuple[bool, bool]] = set()
        """The decode options found to have no exact codec (said once each)."""
        self.live: dict[Hashable, _Live] = {}
        """Per live request, its stream and what a handover needs."""
        self._failed = False

    def __len__(self) -> int:
        """The number of live requests."""
        return len(self.live)

    def codec(self, skip_special_tokens: bool, spaces_between_special_tokens: bool) -> Codec | None:
        """The codec for these options, or None if puredetok has no exact one (logged once)."""
        options = plain_options(bool(skip_special_tokens), None, bool(spaces_between_special_tokens))
        codec, reason = exact_or_why(self.codecs.built(self.tokenizer, options))
        key = (options.skip_special_tokens, bool(options.spaces_between_special_tokens))
        if codec is None and key not in self._unmodelled:
            self._unmodelled.add(key)
            _logger.warning(
                "puredetok: no exact model of this tokenizer with skip_special_tokens=%s, "
                "spaces_between_special_tokens=%s (%s): SGLang's own detokenizer decodes those requests",
                *key,
                reason,
            )
        return codec

    def decode(
        self,
        batch: Any,
        own: Callable[[Any], list[str]],
        engine_live: MutableMapping[Any, Any],
        handover: _Handover,
    ) -> list[str]:
        """The output strings of ``batch`` (a ``BatchTokenIDOutput``), one per request.

        ``own`` is SGLang's own decode step, given the requests puredetok does not decode as a
        batch of the same fields; ``engine_live`` its live requests (a request it holds stays
        with it); ``handover`` gives it a live request puredetok failed on.
        """
        rids = batch.rids
        reasons = batch.finished_reasons
        live = self.live
        out: list[str] = []
        theirs: list[int] = []
        for index, (rid, ids, reason) in enumerate(zip(rids, batch.decode_ids, reasons)):
            record = live.get(rid)
            if record is not None and reason is None and len(ids) == 1:
                token_id = ids[0]
                if record.hold is record.idle and 0 <= token_id < record.size:
                    text = record.fast[token_id]
                    if text is not None:  # the core's fast path (see puredetok._core.steady)
                        if text:
                            record.sent.append(text)
                        out.append(text)
                        continue
            try:
                if record is None:
                    text = self._open(batch, index, engine_live)
                elif reason is None and len(ids) == 1 and 0 <= ids[0] < record.size:
                    idle, pieces = record.hold is record.idle, len(record.sent)
                    record.hold, text = step_hold(record.codec, record.hold, ids[0])
                    if text:
                        record.sent.append(text)
                    _settle(record, ids, idle, pieces)
                else:
                    text = self._advance(record, ids, reason, batch.no_stop_trim[index])
                    if reason is not None:
                        del live[rid]
            except Exception:
                self._failure(rid)
                if record is not None:
                    live.pop(rid, None)
                    settled = len(record.sent) if record.hold is record.idle else record.settled
                    handover(
                        rid, "".join(record.sent[:settled]), "".join(record.sent), record.ids, record.context
                    )
                text = None
            if text is None:
                theirs.append(index)
                out.append("")
            else:
                out.append(text)
        if theirs:
            their_batch = SimpleNamespace(
                **{name: [getattr(batch, name)[index] for index in theirs] for name in _FIELDS}
            )
            for index, text in zip(theirs, own(their_batch)):
                out[index] = text
        return out

    def _open(self, batch: Any, index: int, engine_live: MutableMapping[Any, Any]) -> str | None:
        """A request's first message: its text, or None if SGLang's own decodes it."""
        rid = batch.rids[index]
        if rid in engine_live:
            return None
        codec = self.codec(batch.skip_special_tokens[index], batch.spaces_between_special_tokens[index])
        if codec is None:
            return None
        window = list(batch.decode_ids[index])
        offset = batch.read_offsets[index]
        if not 0 <= offset <= len(window):
            raise ValueError(f"read offset {offset} outside the window of {len(window)} ids")
        idle, fast = steady(codec)
        decoded = batch.decoded_texts[index] or ""
        record = _Live(
            codec.decoding.initial,
            idle,
            fast,
            codec,
            [decoded] if decoded else [],
            window[:offset],
            offset,
            1 if decoded else 0,
        )
        prompt = window[:offset]
        if prompt:
            # contract C, on the bare hold: the prompt's text still held back becomes an echo
            record.hold = start(codec, _admitted(codec, prompt)).hold
        reason = batch.finished_reasons[index]
        text = self._advance(record, window[offset:], reason, batch.no_stop_trim[index])
        if reason is None:
            self.live[rid] = record
        return decoded + text

    def _advance(self, record: _Live, ids: Sequence[int], reason: Any, no_stop_trim: bool) -> str:
        """The text of a request's new ids (and, if it finished, the rest, trimmed as SGLang trims)."""
        codec, sent = record.codec, record.sent
        if reason is None:
            idle, pieces = record.hold is record.idle, len(sent)
            record.hold, text = _feed(codec, record.hold, ids)
            if text:
                sent.append(text)
            _settle(record, ids, idle, pieces)
            return text
        matched = reason.get("matched") if isinstance(reason, dict) else None
        if isinstance(matched, int) and len(ids):
            ids = self.trim_stop(list(ids), reason, no_stop_trim)
        hold, text = _feed(codec, record.hold, ids)
        text += finish_hold(codec, hold)
        if isinstance(matched, str):
            before = "".join(sent)
            return str(self.trim_stop(before + text, reason, no_stop_trim))[len(before) :]
        return text

    def _failure(self, rid: Hashable) -> None:
        """Log a failure of puredetok on a request (in full the first time)."""
        if not self._failed:
            self._failed = True
            _logger.exception("puredetok failed on request %r: SGLang's own detokenizer takes it over", rid)
        else:
            _logger.warning("puredetok failed on request %r: SGLang's own detokenizer takes it over", rid)


def _settle(record: _Live, ids: Sequence[int], was_idle: bool, pieces: int) -> None:
    """Keep a live request's ids for a handover after a slow step from a hold that was idle
    (``was_idle``) with ``pieces`` texts sent: none when its hold is idle again (the last id stays
    as context), else these ids added (and, if it was idle, the sent texts before them counted).
    """
    kept: list[int] = record.ids
    if record.hold is record.idle:
        if len(ids):
            kept[:] = [ids[-1]]
        record.context = len(kept)
        return
    if was_idle:
        record.settled = pieces
    kept.extend(ids)


def _feed(codec: Codec, hold: Hashable, ids: Sequence[int]) -> tuple[Hashable, str]:
    """:func:`~puredetok._core.feed_hold`, with ids outside the vocabulary taken as SGLang takes
    them (as id 0: its ``_clamp_decode_ids``).
    """
    try:
        if len(ids) == 1:
            return step_hold(codec, hold, ids[0])
        return feed_hold(codec, hold, ids)
    except InvalidTokenError:
        return feed_hold(codec, hold, _admitted(codec, ids))


def _admitted(codec: Codec, ids: Sequence[Any]) -> list[int]:
    """The ids, those outside ``[0, vocab_size)`` (or not ints) replaced by 0 as SGLang does."""
    size = codec.vocab_size
    return [token_id if type(token_id) is int and 0 <= token_id < size else 0 for token_id in ids]


_CODECS = CodecCache()
"""The plugin's codecs (of every ``DetokenizerManager`` of the process)."""
