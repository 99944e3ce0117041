"""``DetokenizeManager``: many concurrent requests' streams, one batch of messages at a time.

The manager holds the only mutable state of detokenization, a map from request id to its
immutable :class:`~puredetok.stops.Stream` record, and applies the pure core and stop layer to
it. docs/adapters.md ("DetokenizeManager") says how requests open, end and are refused, and
what its capacity costs.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import is_not
from typing import Any

import attrs

from puredetok._core import Codec, OutOfVocab
from puredetok._options import whole
from puredetok.errors import InvalidTokenError
from puredetok.serving._codec_cache import DEFAULT_MAX_CODECS, CodecCache, Setting
from puredetok.serving._eos import eos_token_ids
from puredetok.serving._messages import (
    DEFAULT_PARAMS,
    UNKNOWN_REQUEST,
    DetokenizeBatch,
    DetokenizeMsg,
    Ended,
    Failed,
    Opening,
    ReplyBatch,
    SamplingParams,
    Uid,
    UserReply,
)
from puredetok.serving._uids import Uids, uid_list
from puredetok.stops import (
    FinishReason,
    StopRules,
    Stream,
    abort,
    advance,
    advance_each,
    advance_many,
    close,
    open_like,
    open_stream,
)
from puredetok.stops._rules import check_stop_limits

DEFAULT_REMEMBER_ENDED = 65_536
"""How many ended uids the manager remembers (to report late messages for them)."""

DEFAULT_MAX_LIVE = 65_536
"""How many requests a manager holds at once by default (about 16 MB of records at 240 B each)."""

DEFAULT_MAX_STOPS = 256
"""How many stop strings one request may have by default."""

DEFAULT_MAX_STOP_CHARS = 16_384
"""How many characters one request's stop strings may have together by default (their rules are
built in time linear in it: 11 - 15 ms of CPU for 16,384 characters, see docs/benchmarks.md)."""

ENDED_ALREADY = "has already ended"
"""In the error of a message for a request that has ended (it is ignored)."""

RULES_CACHE = 4_096
"""Distinct stop rules kept for sharing between requests (the cache starts over when full)."""


class DetokenizeManager:
    """Streams text for many requests of one tokenizer.

    ``max_byte_run`` and ``out_of_vocab`` are the manager's setting of those codec options (see
    :func:`puredetok.codec_for`), for every request whose :class:`SamplingParams` leave them None.
    A request's codec comes from the manager's codec cache, :attr:`codecs` (how codecs are cached
    and shared: docs/adapters.md): built once per set of decode options and shared by every request
    with those options, another ``max_byte_run`` derived without a rebuild, options that decode
    identically one codec object. The cache keeps at most ``max_codecs`` codecs
    (:data:`DEFAULT_MAX_CODECS`), the least recently used dropped first; one a live request still
    uses is found again, not rebuilt. Pass ``codecs=other.codecs`` to share the cache of another
    manager (then ``max_codecs`` is that cache's, and must not be given). The codec of the engines'
    default options (``SamplingParams()``) is built with the manager, so no request waits for it.
    ``max_live`` bounds the requests live at once: a request that would open past it is refused (an
    error reply, or ``ValueError`` from :meth:`open` and :meth:`attach`). ``vocabulary`` is
    :func:`~puredetok._build.read_vocabulary` of ``tokenizer`` if the caller already has it (several
    managers of one tokenizer: read once, not once per manager); None reads it with the manager,
    unless the cache has it already.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        remember_ended: int = DEFAULT_REMEMBER_ENDED,
        codecs: CodecCache | None = None,
        max_byte_run: int | None = None,
        out_of_vocab: OutOfVocab = "raise",
        max_live: int = DEFAULT_MAX_LIVE,
        max_stops: int = DEFAULT_MAX_STOPS,
        max_stop_chars: int = DEFAULT_MAX_STOP_CHARS,
        max_codecs: int | None = None,
        vocabulary: Mapping[str, int] | None = None,
    ) -> None:
        whole("remember_ended", remember_ended, 0)
        whole("max_live", max_live, 1)
        whole("max_stops", max_stops, 0)
        whole("max_stop_chars", max_stop_chars, 0)
        self._setting = Setting(max_byte_run, out_of_vocab)
        if codecs is None:
            codecs = CodecCache(DEFAULT_MAX_CODECS if max_codecs is None else max_codecs)
        elif max_codecs is not None:
            raise ValueError(
                "max_codecs bounds the cache a manager makes: a manager handed one (codecs=...) keeps "
                f"its bound ({codecs.max_codecs})"
            )
        elif not isinstance(codecs, CodecCache):
            raise TypeError(
                f"codecs must be another manager's codecs (a codec cache), not {type(codecs).__name__}"
            )
        self.tokenizer = tokenizer
        self.remember_ended = remember_ended
        self.max_live = max_live
        """The most requests live at once: past it, a new request gets an error."""
        self.max_stops = max_stops
        """The most stop strings of one request: past it, the request is refused."""
        self.max_stop_chars = max_stop_chars
        """The most characters of one request's stop strings together: past it, it is refused."""
        self.codecs = codecs
        """The codec cache this manager asks for its requests' codecs (shared with whoever was
        handed it: ``DetokenizeManager(tokenizer, codecs=manager.codecs)``)."""
        self.max_byte_run = max_byte_run
        """The cap on held byte-fallback runs of requests that do not set one (None: no cap)."""
        self.out_of_vocab: OutOfVocab = out_of_vocab
        """What ids past the vocabulary do in requests that do not say."""
        self.eos_token_ids = eos_token_ids(tokenizer)
        self._rules: dict[tuple[object, ...], StopRules] = {}
        self._fresh: dict[tuple[object, ...], Stream] = {}
        """Per decode options and stop rules, a request's record before its first token (shared)."""
        self._evictions = 0
        """The cache's :attr:`~CodecCache.evictions` when :attr:`_fresh` was last pruned."""
        self._live: dict[Uid, Stream] = {}
        self._consumed: Counter[Uid] = Counter()
        """Per live request, how many generated ids it has been sent since it opened (for a
        hand-back: where the ids of its re-opening start)."""
        self._ended: OrderedDict[Uid, str] = OrderedDict()
        """Uids that have had their finished reply, and why they ended (bounded by ``remember_ended``)."""
        self._answered: OrderedDict[Uid, None] = OrderedDict()
        """Uids not held that a message named, answered once with the finished ``"unknown request"``
        error (bounded by ``remember_ended``): a later message gets that error unfinished, an
        opening still opens them (a hand-back's re-opening follows ids sent before it)."""
        codecs.read(tokenizer, vocabulary)  # now, not in a build beside a loop (see CodecCache.read)
        self._default = self.codec_of(DEFAULT_PARAMS)
        """The default options' codec, built now (the first request should not wait for it) and
        held, so that the cache never drops it for good."""

    def __len__(self) -> int:
        """The number of live requests."""
        return len(self._live)

    def __contains__(self, uid: object) -> bool:
        """Whether ``uid`` is a live request."""
        return uid in self._live

    @property
    def max_codecs(self) -> int:
        """The most codecs the manager's cache keeps (least recently used dropped first)."""
        return self.codecs.max_codecs

    def codec(
        self,
        skip_special_tokens: bool = True,
        clean_up_tokenization_spaces: bool | None = None,
        spaces_between_special_tokens: bool | None = None,
        *,
        max_byte_run: int | None = None,
        out_of_vocab: OutOfVocab | None = None,
    ) -> Codec:
        """The shared codec for these decode options (built on first use). ``max_byte_run`` and
        ``out_of_vocab`` as in :class:`SamplingParams`: None for the manager's setting, and
        ``max_byte_run=0`` for no cap. Raises ``ValueError`` for an invalid option
        (:class:`~puredetok.errors.OptionTypeError`, one, for an option of the wrong type), and
        the error of a build that failed (``out_of_vocab="ignore"`` for a tokenizer whose decode
        does not skip ids past its vocabulary).

        ``spaces_between_special_tokens`` only matters to a tokenizer whose class overrides
        transformers' decode (see :func:`~puredetok.codec_for`); for every other one the codec
        built without it is shared.
        """
        options = self._setting.options(
            skip_special_tokens,
            clean_up_tokenization_spaces,
            spaces_between_special_tokens,
            max_byte_run,
            out_of_vocab,
        )
        return self.codecs.codec(self.tokenizer, options)

    def codec_of(self, params: SamplingParams) -> Codec:
        """The shared codec for the decode options of ``params``."""
        return self.codecs.codec(self.tokenizer, self._setting.options_of(params))

    def rules(self, params: SamplingParams) -> StopRules:
        """The stop rules of ``params``, with this tokenizer's EOS ids (raises ValueError if invalid).

        Equal rules are one shared object (a request's record then costs a few hundred bytes).
        """
        key = _rules_key(params)
        rules = self._rules.get(key)
        if rules is None:
            # the limits before the rules are built: their cost grows with both
            check_stop_limits(params.stop, self.max_stops, self.max_stop_chars)
            rules = StopRules(
                stop=params.stop,
                stop_token_ids=params.stop_token_ids,
                eos_token_ids=self.eos_token_ids,
                ignore_eos=params.ignore_eos,
                max_new_tokens=params.max_new_tokens,
                min_tokens=params.min_tokens,
                include_stop_str_in_output=params.include_stop_str_in_output,
            )
            if len(self._rules) >= RULES_CACHE:
                self._rules.clear()
            self._rules[key] = rules
        return rules

    def _fresh_stream(self, params: SamplingParams) -> Stream:
        """A request's record with these parameters before any token (one shared record, as
        records are values); raises ValueError for invalid parameters.
        """
        key = (
            params.skip_special_tokens,
            params.clean_up_tokenization_spaces,
            params.spaces_between_special_tokens,
            params.max_byte_run,
            params.out_of_vocab,
            _rules_key(params),
        )
        fresh = self._fresh.get(key)
        if fresh is None:
            fresh = open_stream(self.codec_of(params), self.rules(params))
            if self._evictions != self.codecs.evictions:  # records must not hold dropped codecs
                self._evictions = self.codecs.evictions
                kept = set(map(id, self.codecs.kept()))
                self._fresh = {k: old for k, old in self._fresh.items() if id(old.codec) in kept}
            if len(self._fresh) >= RULES_CACHE:
                self._fresh.clear()
            self._fresh[key] = fresh
        return fresh

    def open(self, uid: Uid, opening: Opening | None = None) -> Stream:
        """Start request ``uid`` (``Opening()``, no prompt and default parameters, if None); raises
        ValueError if it is live or has ended, or if the opening is invalid (a bad prompt id or stop
        option, a state that is not a stream of this tokenizer with these decode options).
        """
        opening = opening or Opening()
        try:
            stream = self._opened(uid, opening)
        except TypeError as error:
            raise ValueError(_invalid_parameters(uid, error)) from error
        self._store(uid, stream, opening.consumed)
        return stream

    def handle(self, messages: Sequence[DetokenizeMsg]) -> list[UserReply]:
        """One reply per message, in order: the new text, and whether and why the request ended.

        A message with an invalid token id still applies its valid ids; the invalid ones add no
        text and are named in the reply's ``error`` (the request goes on). Each request gets one
        finished reply: a refused opening (invalid, past ``max_live``, or a second one for a live
        request) ends its request with the error; the first message without an opening for a uid
        never seen gets the finished :data:`~puredetok.serving._messages.UNKNOWN_REQUEST` error; a
        later message, or an opening, for a uid that has had its finished reply gets an error reply
        that is not finished and changes nothing.
        """
        return self.handle_batch(DetokenizeBatch.of(messages)).replies()

    def handle_batch(self, batch: DetokenizeBatch) -> ReplyBatch:
        """:meth:`handle` column by column: what the worker runs on a frame, building no record
        per message (the replies are in the same order as the messages).

        The batch's first openings are opened before anything else (:meth:`_open_ahead`). The
        messages of live requests go to the stop layer in runs, all at once
        (:func:`~puredetok.stops.advance_each`), and those the scheduler ends are closed after it;
        a message that needs more (an opening not opened ahead, an end on a stop token, an unknown
        uid, a second message of a uid in the run, an invalid id) ends the run and takes
        :meth:`_one`, and the next run starts after it.
        """
        uids, counts = batch.uids, batch.counts
        messages: Sequence[Any] = batch.token_ids if counts is None else _split(batch.token_ids, counts)
        replies = _Replies()
        opens = dict(batch.opens)
        why = {position: FinishReason(reason, matched) for position, reason, matched in batch.reasons}
        ends = {position: why.get(position, _SCHEDULER_LENGTH) for position in batch.finished}
        # An end on a stop token id takes the per-message path (the token is split off first).
        stop_tokens = {position for position, end in why.items() if type(end.matched) is int}
        apart = stop_tokens & ends.keys()  # the positions that take the per-message path
        if opens:
            apart |= opens.keys() - self._open_ahead(uids, opens, apart)
        closing = sorted(ends)
        live = self._live
        # Each uid once (the usual batch): no message changes whether a later one's request is
        # live, nor its record (a request that ends here, or opens at its own position, has no
        # later message), so the records are looked up once, in one C-level pass; which requests
        # are live is then read from them (a byte per message) only when one is not.
        streams = list(map(live.get, uids)) if len(set(uids)) == len(uids) else None
        known = None if streams is None or all(streams) else bytes(map(is_not, streams, repeat(None)))
        position = 0
        for special in [*sorted(apart), len(uids)]:
            while position < special:
                if streams is None:
                    stop = _run_end(uids, position, special, live)
                else:
                    stop = special if known is None else _live_to(known, position, special)
                if stop - position < _RUN_FROM:
                    for at in range(position, max(stop, position + 1)):
                        self._one(at, uids[at], messages[at], None, ends.get(at), replies)
                    position = at + 1
                    continue
                position = self._run(uids, streams, messages, counts, position, stop, ends, closing, replies)
                if position < special:
                    self._one(position, uids[position], messages[position], None, ends.get(position), replies)
                    position += 1
            if special < len(uids):
                self._one(
                    special, uids[special], messages[special], opens.get(special), ends.get(special), replies
                )
                position += 1
        return ReplyBatch(uids, tuple(replies.outputs), tuple(replies.ended), tuple(replies.errors))

    def _open_ahead(self, uids: Sequence[Uid], opens: dict[int, Opening], apart: set[int]) -> set[int]:
        """Open the requests of a batch's first openings before its runs, so that their messages go
        in the runs; returns the positions opened.

        In position order, up to the first opening that needs its place in the batch: its uid came
        earlier in the batch, its message is set ``apart``, it is refused (:meth:`_one` gives the
        error there), or its uid was answered as unknown (the bounded memory of those forgets it in
        message order, as the per-message path does, or a later eviction would take another uid).
        Those after it keep their places too, so requests open in the order of their messages (the
        order :meth:`drain` hands them back in). None is opened ahead when the batch
        could fill the manager: whether a message finds it full would then depend on what came
        before it.
        """
        live = self._live
        if len(live) + len(opens) >= self.max_live:
            return set()
        first = dict(zip(reversed(uids), range(len(uids) - 1, -1, -1)))  # each uid's first position
        opened = set()
        for position in sorted(opens):
            uid, opening = uids[position], opens[position]
            if first[uid] != position or position in apart or uid in self._answered:
                break
            try:
                live[uid] = self._opened(uid, opening)
            except (ValueError, TypeError):
                break
            self._consumed[uid] = opening.consumed
            opened.add(position)
        return opened

    def _run(
        self,
        uids: Sequence[Uid],
        streams: list[Stream | None] | None,
        messages: Sequence[Any],
        counts: Sequence[int] | None,
        begin: int,
        end: int,
        ends: dict[int, FinishReason],
        closing: list[int],
        replies: _Replies,
    ) -> int:
        """The messages from ``begin`` to ``end`` (of live requests, each uid once: see
        :func:`_run_end`), advanced at once, and those the scheduler ends (``ends``, by position;
        ``closing``: their positions in order) ended; returns where it stopped (before ``end`` if
        a message would raise: it takes the per-message path). ``streams``: the records of the
        batch's requests, looked up before (None: looked up here).
        """
        live = self._live
        whole = not begin and end == len(uids)
        run = uids if whole else uids[begin:end]
        if streams is None:
            records: Sequence[Any] = list(map(live.__getitem__, run))
        else:
            records = streams if whole else streams[begin:end]
        news, texts, ended = advance_each(records, messages[begin : begin + len(run)])
        done = len(news)
        taken = run if done == len(run) else run[:done]
        for at in closing[bisect_left(closing, begin) : bisect_left(closing, begin + done)]:
            offset = at - begin
            if news[offset].finish_reason is None:  # not ended already by its own stop rules
                news[offset], tail = _end_by_scheduler(news[offset], ends[at], None)
                texts[offset] += tail
                ended.append(offset)
        live.update(zip(taken, news))
        self._consumed.update(taken if counts is None else _summed(taken, counts[begin : begin + done]))
        for offset in sorted(ended):
            self._end(taken[offset], news[offset], begin + offset, replies)
        replies.outputs += texts
        return begin + done

    def _one(
        self,
        position: int,
        uid: Uid,
        tokens: Any,
        opening: Opening | None,
        end: FinishReason | None,
        replies: _Replies,
    ) -> None:
        """A message that needs more than a run gives: it may open its request (``opening``), end
        it (``end``: the scheduler's reason), name a uid that is not live, or hold an invalid id.
        """
        stream = self._live.get(uid)
        many = type(tokens) is not int
        if opening is not None:
            stream = self._first(position, uid, stream, opening, len(tokens) if many else 1, replies)
            if stream is None:
                replies.outputs.append("")
                return
        elif stream is None:  # not live: an error reply, nothing else changes
            finished, error = self._not_live(uid)
            if finished:
                replies.ended.append((position, None, None))
            replies.errors.append((position, error))
            replies.outputs.append("")
            return
        else:
            self._consumed[uid] += len(tokens) if many else 1
        last = None
        if end is not None and type(end.matched) is int:  # the scheduler stopped on a token
            tokens, last = _split_stop_token(stream, end.matched, tokens if many else (tokens,))
            many = True
        old = stream
        try:
            stream, text = advance_many(stream, tokens) if many else advance(stream, tokens)
        except InvalidTokenError:
            stream, text, error = _skipping_invalid(stream, tokens if many else (tokens,))
            replies.errors.append((position, error))
        if end is not None and stream.finished is False:
            stream, tail = _end_by_scheduler(stream, end, last)
            text += tail
        if stream is not old:
            if stream.finish_reason is None:
                self._live[uid] = stream
            else:
                self._end(uid, stream, position, replies)
        replies.outputs.append(text)

    def _first(
        self, position: int, uid: Uid, stream: Stream | None, opening: Opening, count: int, replies: _Replies
    ) -> Stream | None:
        """The record of a message that opens its request: the new record (stored, its ``count``
        ids counted on from the opening's ``consumed``), or None with the error in ``replies``: a
        refused opening ends its request (a live one too: opened twice, dropped; the uid remembered
        as ended), unless the uid has had its finished reply (then it changes nothing).
        """
        if stream is None and uid in self._ended:
            replies.errors.append(
                (position, f"request {uid!r} {ENDED_ALREADY} ({self._ended[uid]}): opening ignored")
            )
            return None
        if stream is not None:
            error = f"request {uid!r} refused: already open (opened twice): it ends"
        elif len(self._live) >= self.max_live:
            error = self._full(uid)
        else:
            try:
                first = self._opened(uid, opening)
            except ValueError as invalid:
                error = str(invalid)
            except TypeError as invalid:  # a parameter of the wrong type, found building its rules or codec
                error = _invalid_parameters(uid, invalid)
            else:
                self._store(uid, first, opening.consumed + count)
                return first
        self._answered.pop(uid, None)
        self._live.pop(uid, None)
        self._consumed.pop(uid, None)
        self._remember(uid, "refused")
        replies.ended.append((position, None, None))
        replies.errors.append((position, error))
        return None

    def _end(self, uid: Uid, stream: Stream, position: int, replies: _Replies) -> None:
        """Request ``uid`` has ended with ``stream``: forget its record, note why."""
        reason = stream.finish_reason
        assert reason is not None
        self._live.pop(uid, None)
        self._consumed.pop(uid, None)
        self._remember(uid, reason.kind)
        replies.ended.append((position, reason.kind, reason.matched))

    def detokenize(self, messages: Sequence[DetokenizeMsg]) -> list[str]:
        """One incremental text per message, in order (see :meth:`handle` for errors and endings)."""
        return list(self.handle_batch(DetokenizeBatch.of(messages)).outputs)

    def abort(self, uids: Uids) -> list[UserReply]:
        """Drop these requests: one reply each; nothing held is emitted.

        ``uids`` is a collection (:data:`~puredetok.serving._uids.Uids`): a bare ``str`` or
        ``bytes`` raises ``TypeError`` (for one request, pass ``[uid]``), and so does an item
        that is not an ``int`` or ``str``; nothing is aborted then. A live request's reply is
        finished with ``finish_reason="abort"``; so is a uid the manager has never answered (the
        scheduler has not opened it yet), with an error saying it was not live. A uid that has
        already had its finished reply (it ended, or a message for it was answered as unknown)
        gets an error reply that is not finished: no request gets two. Every uid is then
        remembered as ended, so that its late messages are refused.
        """
        replies = []
        for uid in uid_list(uids):
            stream = self._live.pop(uid, None)
            self._consumed.pop(uid, None)
            if stream is not None:
                abort(stream)
                replies.append(UserReply(uid, "", True, "abort"))
            elif uid in self._ended:
                replies.append(UserReply(uid, "", False, error=self._late(uid)))
                continue
            elif self._answered.pop(uid, 0) is None:
                replies.append(UserReply(uid, "", False, error=self._unknown(uid)))
            else:
                replies.append(UserReply(uid, "", True, "abort", error=f"no live request {uid!r}"))
            self._remember(uid, "abort")
        return replies

    def refuse(self, uid: Uid, error: str, *, opening: bool = False) -> UserReply:
        """End request ``uid`` with ``error`` for a reason found outside the manager (a limit, a
        message that could not be read, a bug); its reply.

        A live request is dropped (nothing held is emitted). The reply is finished, unless the uid
        has already had its finished reply (it ended, or a message for it was answered as unknown,
        when this message is not an ``opening``, which would have started it anew): then it is an
        error reply that is not finished. The uid is remembered as ended.
        """
        if uid in self._ended:
            return UserReply(uid, "", False, error=f"{error} ({self._late(uid)})")
        answered = self._answered.pop(uid, 0) is None and not opening
        self._live.pop(uid, None)
        self._consumed.pop(uid, None)
        self._remember(uid, "refused")
        return UserReply(uid, "", not answered, error=error)

    def known(self, uid: Uid) -> bool:
        """Whether ``uid`` is live, remembered as ended, or was answered as unknown: a uid that has
        named a request here (a new request must take another).
        """
        return uid in self._live or uid in self._ended or uid in self._answered

    def detach(self, uid: Uid) -> Stream:
        """Take request ``uid`` out of this manager (to move or park it); raises KeyError if not live.

        The record is immutable and picklable: :meth:`attach` it here or to another manager and
        the request goes on exactly where it stopped.
        """
        stream = self._live.pop(uid)
        self._consumed.pop(uid, None)
        return stream

    def attach(self, uid: Uid, stream: Stream) -> None:
        """Put a detached request back (here or in another manager); raises ValueError if live.

        A stream that travelled as bytes or as a pickle is resumed first, with this manager's codec
        for its decode options: ``manager.attach(uid, saved.resume(manager.codec_of(params)))``.
        """
        if uid in self._live:
            raise ValueError(f"request {uid!r} is already open")
        if stream.finish_reason is not None:
            raise ValueError(f"request {uid!r} has already ended ({stream.finish_reason.kind})")
        check_stop_limits(stream.rules.stop, self.max_stops, self.max_stop_chars, "its stream has ")
        self._check_room(uid)
        self._ended.pop(uid, None)
        self._store(uid, stream, 0)

    def drain(self) -> list[tuple[Uid, bytes, int]]:
        """Hand every live request back, as ``(uid, Stream.to_bytes(), consumed)``, and hold none.

        ``consumed`` is how many generated ids the request was sent since it opened (invalid ones
        included; counting on from its opening's ``consumed``): an :class:`Opening` with the state
        and that count, in a message with the request's ids from there on, continues it exactly
        (here or in any manager of the same tokenizer). The uids are remembered as handed back, so
        a late message for one gets an error here. All or nothing: if a request's stream cannot
        be saved, raises :class:`ValueError` naming it and hands none back (:meth:`hand_back`
        hands back every other one).
        """
        saved = [(uid, _saved(stream)) for uid, stream in self._live.items()]
        for uid, state in saved:
            if not isinstance(state, bytes):
                raise ValueError(
                    f"request {uid!r} cannot be handed back: its state cannot be saved ({state})"
                )
        return self._hand_over(saved)[0]

    def hand_back(self) -> tuple[list[tuple[Uid, bytes, int]], list[tuple[Uid, str]]]:
        """:meth:`drain`, request by request: ``(handed, failed)``, every live request in one or
        the other, and none held after. ``handed`` as :meth:`drain` returns it; ``failed``, each
        request whose stream cannot be saved and why: it ends here (remembered as ended), and
        costs no other request its hand-back.
        """
        return self._hand_over([(uid, _saved(stream)) for uid, stream in self._live.items()])

    def _hand_over(
        self, saved: list[tuple[Uid, bytes | str]]
    ) -> tuple[list[tuple[Uid, bytes, int]], list[tuple[Uid, str]]]:
        """End every live request as handed back (``saved``: each one's state, or why it has none)."""
        handed: list[tuple[Uid, bytes, int]] = []
        failed: list[tuple[Uid, str]] = []
        for uid, state in saved:
            consumed = self._consumed.pop(uid, 0)
            if isinstance(state, bytes):
                handed.append((uid, state, consumed))
                self._remember(uid, "handed back")
            else:
                failed.append(
                    (uid, f"request {uid!r} could not be handed back: its state cannot be saved ({state})")
                )
                self._remember(uid, "not handed back")
        self._live.clear()
        return handed, failed

    def _store(self, uid: Uid, stream: Stream, consumed: int) -> None:
        """Make ``stream`` the live record of ``uid``, which has consumed ``consumed`` ids."""
        self._live[uid] = stream
        self._consumed[uid] = consumed
        self._answered.pop(uid, None)

    def _opened(self, uid: Uid, opening: Opening) -> Stream:
        """A new record for ``uid`` (checked, not stored)."""
        if uid in self._live:
            raise ValueError(f"request {uid!r} is already open")
        if uid in self._ended:
            raise ValueError(f"request {uid!r} has already ended ({self._ended[uid]})")
        self._check_room(uid)
        params = opening.params
        if opening.state is None:
            fresh = self._fresh_stream(params)
            return open_like(fresh, opening.prompt_ids) if opening.prompt_ids else fresh
        if opening.prompt_ids:
            raise ValueError(
                f"request {uid!r}: an opening with a state has no prompt (the state continues it)"
            )
        stream = Stream.from_bytes(
            self.codec_of(params), opening.state, max_stops=self.max_stops, max_stop_chars=self.max_stop_chars
        )
        if stream.finish_reason is not None:
            raise ValueError(
                f"request {uid!r}: the state is of a stream that has ended ({stream.finish_reason.kind})"
            )
        shared = self.rules(params)
        if stream.rules != shared:
            return stream
        codec, _, hold, held, min_left, max_left, reason = stream.fields()
        return Stream(codec, shared, hold, held, min_left, max_left, reason)

    def _not_live(self, uid: Uid) -> tuple[bool, str]:
        """``(finished, error)`` of a message without an opening for a uid that is not live: the
        first such message of a uid never seen is answered finished, any later one not.
        """
        if uid in self._ended:
            return False, self._late(uid)
        if uid in self._answered:
            return False, self._unknown(uid)
        answered = self._answered
        answered[uid] = None
        while len(answered) > self.remember_ended:
            answered.popitem(last=False)
        return True, self._unknown(uid)

    def _check_room(self, uid: Uid) -> None:
        if len(self._live) >= self.max_live:
            raise ValueError(self._full(uid))

    def _full(self, uid: Uid) -> str:
        return f"request {uid!r} refused: {self.max_live:,} requests are live, the most it holds (max_live)"

    def _late(self, uid: Uid) -> str:
        return f"request {uid!r} {ENDED_ALREADY} ({self._ended[uid]}): message ignored"

    def _unknown(self, uid: Uid) -> str:
        return (
            f"{UNKNOWN_REQUEST} {uid!r}: no open request has this uid (never opened, ended, or lost when "
            "a worker restarted); a request's first message carries its Opening: message ignored"
        )

    def _remember(self, uid: Uid, why: str) -> None:
        ended = self._ended
        ended[uid] = why
        ended.move_to_end(uid)
        while len(ended) > self.remember_ended:
            ended.popitem(last=False)


def _saved(stream: Stream) -> bytes | str:
    """``stream.to_bytes()``, or why it cannot be saved."""
    try:
        return stream.to_bytes()
    except (ValueError, TypeError, OverflowError) as error:
        return str(error) or type(error).__name__


@attrs.define
class _Replies:
    """The columns of a reply batch while it is being built."""

    outputs: list[str] = attrs.Factory(list)
    ended: list[Ended] = attrs.Factory(list)
    errors: list[Failed] = attrs.Factory(list)


def _invalid_parameters(uid: Uid, error: TypeError) -> str:
    """The error of an opening whose parameters are of the wrong type."""
    return f"request {uid!r} refused: invalid parameters ({error})"


_SCHEDULER_LENGTH = FinishReason("length")
"""The reason of a request the scheduler ended without saying why."""


def _split(ids: Sequence[int], counts: Sequence[int]) -> list[Sequence[int]]:
    """The ids of each message (``counts[n]`` of them for message ``n``)."""
    messages, cursor = [], 0
    for count in counts:
        messages.append(ids[cursor : cursor + count])
        cursor += count
    return messages


def _rules_key(params: SamplingParams) -> tuple[object, ...]:
    """The fields of ``params`` its stop rules are made of (sequences are stored as tuples)."""
    return (
        params.stop,
        params.stop_token_ids,
        params.ignore_eos,
        params.max_new_tokens,
        params.min_tokens,
        params.include_stop_str_in_output,
    )


_RUN_FROM = 4
"""From this many messages of live requests on, :meth:`DetokenizeManager.handle_batch` hands them
to the stop layer as one run (:func:`~puredetok.stops.advance_each`); fewer take the per-message
path, which costs less than a run's setting up."""

RUN_PROBE = 16
"""The first stretch of a batch a run looks at, in uids: each next stretch is twice as long, so
finding where a run ends costs at most about twice its length plus this, whatever follows it."""


def _run_end(uids: Sequence[Uid], begin: int, end: int, live: dict[Uid, Stream]) -> int:
    """Where the run from ``begin`` ends (at most ``end``): before the first uid that is not live
    or that came before in the run. The uids are looked at in stretches of doubling length, so the
    cost is linear in the run's length (a batch of many short runs costs linear time too).
    """
    # The shortest runs (a uid that is not live, one repeated at once) are settled first: they are
    # what a batch of many messages for few or unknown requests is made of.
    seen: set[Uid] = set()
    for position in range(begin, min(end, begin + _RUN_FROM)):
        uid = uids[position]
        if uid in seen or uid not in live:
            return position
        seen.add(uid)
    contains = live.__contains__
    position, stretch = begin + len(seen), RUN_PROBE
    while position < end:
        chunk = uids[position : min(end, position + stretch)]
        known = list(map(contains, chunk))
        if False in known:
            chunk = chunk[: known.index(False)]
        distinct = set(chunk)
        if len(distinct) != len(chunk) or not seen.isdisjoint(distinct):
            for uid in chunk:
                if uid in seen:
                    return position
                seen.add(uid)
                position += 1
            raise AssertionError("a repeat was found")  # pragma: no cover
        position += len(chunk)
        if len(chunk) < len(known):
            return position
        seen |= distinct
        stretch *= 2
    return position


def _live_to(known: bytes, begin: int, end: int) -> int:
    """Where the run from ``begin`` ends (at most ``end``) in a batch whose uids are distinct:
    before the first uid that is not live (``known``: one byte per message, 1 if its uid is live).
    """
    stop = known.find(0, begin, end)
    return end if stop < 0 else stop


def _summed(uids: Sequence[Uid], counts: Sequence[int]) -> Counter[Uid]:
    """Ids per uid in a batch (a uid may have several messages)."""
    summed: Counter[Uid] = Counter()
    for uid, count in zip(uids, counts):
        summed[uid] += count
    return summed


def _split_stop_token(
    stream: Stream, stopped_on: int, ids: Sequence[int]
) -> tuple[Sequence[int], int | None]:
    """A message's ids without the stop token the scheduler stopped on, if it is their last (then
    returned as ``last``: its text goes as a stop token's would).
    """
    if not 0 <= stopped_on < stream.codec.vocab_size or not ids or ids[-1] != stopped_on:
        return ids, None
    return ids[:-1], ids[-1]


def _end_by_scheduler(stream: Stream, end: FinishReason, last: int | None) -> tuple[Stream, str]:
    """The scheduler ended a running stream, for reason ``end``: the text it still holds, and the
    ended stream. A stop string found in that text ends it first (the stop layer's reason wins);
    ``last`` is the token the scheduler stopped on, not yet consumed (its text only if included).
    """
    if end.kind == "abort":
        return abort(stream), ""
    text = ""
    if last is not None and stream.rules.include_stop_str_in_output:
        try:
            stream, text = advance(stream, last)
        except InvalidTokenError:
            pass
        if stream.finish_reason is not None:
            return stream, text
    stream, tail = close(stream)
    assert stream.finish_reason is not None
    if stream.finish_reason.kind == "length" and end.kind != "length":
        codec, rules, hold, held, min_left, max_left, _ = stream.fields()
        stream = Stream(codec, rules, hold, held, min_left, max_left, end)
    return stream, text + tail


def _skipping_invalid(stream: Stream, ids: Sequence[int]) -> tuple[Stream, str, str]:
    """Apply the valid ids of ``ids`` one by one, skipping the invalid ones; name them in the error."""
    texts, bad, vocab_size = [], [], 0
    for position, token_id in enumerate(ids):
        if stream.finish_reason is not None:
            break
        try:
            stream, text = advance(stream, token_id)
        except InvalidTokenError as invalid:
            bad.append(f"{token_id!r} at position {position}")
            vocab_size = invalid.vocab_size
            continue
        texts.append(text)
    names = ", ".join(bad)
    return stream, "".join(texts), f"invalid token id(s) {names} skipped: ids are ints in [0, {vocab_size})"
