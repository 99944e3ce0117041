"""Replaying a token trace through the :class:`DetokenizeManager`, checking every request.

Each request's streamed text is checked against ``tokenizer.decode`` itself (the oracle), never
against the core, for G1 (exact), G2 (prefix-safe) and G4 (no transient U+FFFD), in time linear
in the trace and memory bounded by the requests live at once: docs/trace.md says what each
check is, and when a request is compared as it streams (:class:`Reference`) or kept and checked
whole.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from puredetok._build import reference_decode
from puredetok._core import ID_LIMIT, Codec, DecodeState, finish, start, step
from puredetok.serving._codec_cache import CodecCache
from puredetok.serving._detokenize_manager import DEFAULT_REMEMBER_ENDED, DetokenizeManager
from puredetok.serving._messages import (
    DEFAULT_PARAMS,
    DetokenizeMsg,
    Opening,
    SamplingParams,
    Uid,
    UserReply,
)
from puredetok.stops import StopRules, Stream, advance, open_stream
from puredetok_audit.replay._incremental import Aligned, StopFinder, common_prefix
from puredetok_audit.replay._trace import TraceError, TraceEvent

CHECKS = ("G1", "G2", "G4")
"""The guarantees checked per request."""

CHECK_FACTOR = 4
"""The checks made while a request runs cost at most this many times its own size (its ids and
text), so that a replay stays linear however the request's events are cut."""

CHECK_START = 256
"""Credit every request starts with (so that a short request is checked after every event)."""

MAX_LISTED = 20
"""The summary names at most this many failed requests (the count is always complete)."""

MAX_NAMED_IDS = 5
"""An input error names at most this many of an event's invalid ids (and counts the others)."""


def valid_ids(ids: Sequence[Any], size: int, what: str = "token") -> tuple[tuple[int, ...], str | None]:
    """The ids of ``ids`` that are ints in ``[0, size)``, and the input error that names the
    others (None if there are none): anything a trace line holds, ``what`` naming the ids.
    """
    bad = [
        (position, value)
        for position, value in enumerate(ids)
        if not (type(value) is int and 0 <= value < size)
    ]
    if not bad:
        return tuple(ids), None
    named = ", ".join(f"{_shown(value)} at position {position}" for position, value in bad[:MAX_NAMED_IDS])
    more = f" and {len(bad) - MAX_NAMED_IDS:,} more" if len(bad) > MAX_NAMED_IDS else ""
    valid = tuple(value for value in ids if type(value) is int and 0 <= value < size)
    return valid, f"invalid {what} id(s) {named}{more} skipped: ids are ints in [0, {size})"


def _shown(value: Any) -> str:
    """A value as JSON shows it, cut short if it is long."""
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= 40 else shown[:37] + "..."


class Reference:
    """A request's expected text, streamed through the core as its ids come, against the text the
    manager streamed (see the module). The text of the last id consumed is compared only at the
    end: a stop token's text may be cut.
    """

    def __init__(self, codec: Codec, rules: StopRules, prompt: Sequence[int], stops: Sequence[str]) -> None:
        self.state: DecodeState = start(codec, prompt)
        self.before = self.state
        """The state before the last id consumed."""
        self.last = ""
        """The text of the last id consumed."""
        self.stream: Stream = open_stream(codec, rules, prompt)
        """Where stepping the ids through the stop rules ends (the ids after that are not its text)."""
        self.consumed = 0
        self.aligned = Aligned(max(map(len, stops), default=0))
        self.finder = StopFinder(stops)

    def add(self, ids: Sequence[int]) -> None:
        """The request's next valid ids."""
        for token in ids:
            if self.stream.finish_reason is not None:
                return
            self.stream, _ = advance(self.stream, token)
            self.consumed += 1
            self.aligned.add(reference=self.last)
            self.finder.add(self.last)
            self.before = self.state
            self.state, self.last = step(self.state, token)

    @property
    def work(self) -> int:
        """Characters compared and searched so far."""
        return self.aligned.work + self.finder.work


@attrs.define
class RequestReport:
    """One request of the trace: what it was sent and streamed, and what the checks found."""

    uid: Uid
    prompt: tuple[int, ...]
    params: SamplingParams
    codec: Codec
    ids: list[int] = attrs.field(factory=list)
    """The valid ids it was sent (invalid ones are skipped, as the manager skips them); kept only
    when it is checked whole (see :attr:`reference`)."""
    count: int = 0
    """How many valid ids it was sent."""
    reference: Reference | None = None
    """Its expected text streamed and compared as it runs; None: it is checked whole, its ids and
    text kept."""
    keep_text: bool = True
    """Whether its text is kept (:attr:`text`)."""
    decoded: int | None = None
    """How many of :attr:`ids` it decoded, once it ended: up to the id that ended it (a stop or
    its ``max_tokens``); the rest came after its end (see :attr:`after_end`)."""
    pieces: list[str] = attrs.field(factory=list)
    """The text streamed, one piece per reply (see :attr:`text`), if it is kept."""
    length: int = 0
    """Characters streamed so far."""
    fffd: list[int] = attrs.field(factory=list)
    """Positions in the text of every U+FFFD that was sent (when it is checked whole)."""
    events: int = 0
    finish_reason: str | None = None
    matched: str | int | None = None
    closed_at_end: bool = False
    ended_by_trace: bool = False
    """Whether the trace itself ended it (``finished`` or ``abort``), rather than a stop rule."""
    errors: list[str] = attrs.field(factory=list)
    """Input errors (invalid ids), not check failures."""
    checks: dict[str, bool | None] = attrs.field(factory=lambda: dict.fromkeys(CHECKS, True))
    failures: list[str] = attrs.field(factory=list)
    """Why a check failed."""
    prompt_text: str | None = None
    """``decode(prompt)``, once it is needed."""
    credit: int = CHECK_START
    """Work the checks made while it runs may still spend (see :data:`CHECK_FACTOR`)."""

    @property
    def text(self) -> str:
        """Everything streamed for this request; raises ValueError if it was not kept."""
        if not self.keep_text:
            raise ValueError(f"request {self.uid!r}: its text was not kept (Replayer(keep_text=True))")
        if len(self.pieces) > 1:
            self.pieces[:] = ["".join(self.pieces)]
        return self.pieces[0] if self.pieces else ""

    @property
    def after_end(self) -> int:
        """Valid ids sent after the request had ended (its limit or a stop): not its text."""
        return 0 if self.decoded is None else self.count - self.decoded

    @property
    def ok(self) -> bool:
        """No check failed."""
        return not self.failures

    def fail(self, check: str, why: str) -> None:
        """Record a failed check."""
        self.checks[check] = False
        self.failures.append(f"{check}: {why}")


@attrs.define
class ReplaySummary:
    """What a replay found, over every request (its size does not grow with the trace)."""

    requests: int = 0
    tokens: int = 0
    """Ids decoded (see :attr:`RequestReport.decoded`)."""
    after_end: int = 0
    """Ids sent after their request had ended (see :attr:`RequestReport.after_end`)."""
    events: int = 0
    failed: int = 0
    with_input_errors: int = 0
    """Requests with invalid ids, plus events after a request ended."""
    ignored_after_stop: int = 0
    """Events for requests a stop rule had ended (expected: the scheduler had not heard yet)."""
    bad_lines: int = 0
    """Lines that are not valid events, skipped (:meth:`Replayer.skip_line`)."""
    failures: list[tuple[Uid, list[str]]] = attrs.field(factory=list)
    """The first :data:`MAX_LISTED` failed requests and why."""

    def count(self, report: RequestReport) -> None:
        """Count one ended request."""
        self.requests += 1
        self.tokens += report.count if report.decoded is None else report.decoded
        self.after_end += report.after_end
        self.events += report.events
        if not report.ok:
            self.failed += 1
            if len(self.failures) < MAX_LISTED:
                self.failures.append((report.uid, list(report.failures)))
        if report.errors:
            self.with_input_errors += 1


class Replayer:
    """Feeds trace events to a :class:`DetokenizeManager` and checks each request when it ends.

    A uid's first event opens its request (with an :class:`Opening` of its prompt and options: a
    trace records requests, it does not spell out their openings). ``defaults`` are the options of
    requests whose first event has none; ``codecs`` and ``vocabulary`` may share codecs and the
    vocabulary read with other managers of the same tokenizer (see :class:`DetokenizeManager`). Ended
    requests are handed out by :meth:`take_ended` and then forgotten; :attr:`summary` counts them.
    ``whole``: check every request against ``tokenizer.decode`` with its ids and text kept (else
    only those whose codec is not exact); ``keep_text``: keep each request's text for
    :attr:`RequestReport.text` (always, when checked whole). ``trace_name`` names the trace in
    messages (``NAME:LINE: ...``, as compilers do; None: ``line LINE: ...``).

    An event's ids that are not ids of the request's codec (not ints, negative, past its
    vocabulary) are skipped, each event's named in one input error of its request, and never
    reach the manager; its other ids are replayed and checked. So are a prompt's.
    """

    def __init__(
        self,
        tokenizer: Any,
        defaults: SamplingParams = DEFAULT_PARAMS,
        *,
        codecs: CodecCache | None = None,
        vocabulary: Mapping[str, int] | None = None,
        remember_ended: int = DEFAULT_REMEMBER_ENDED,
        whole: bool = False,
        keep_text: bool = False,
        trace_name: str | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.trace_name = trace_name
        self.whole = whole
        self.keep_text = keep_text
        self.defaults = defaults
        self.remember_ended = remember_ended
        self.manager = DetokenizeManager(
            tokenizer, codecs=codecs, vocabulary=vocabulary, remember_ended=remember_ended
        )
        self.live: dict[Uid, RequestReport] = {}
        """The requests still running."""
        self.summary = ReplaySummary()
        self.work = 0
        """The checks' cost so far: ids handed to ``tokenizer.decode``, characters it returned, and
        characters compared."""
        self._ended: OrderedDict[Uid, str] = OrderedDict()  # uid -> how it ended: trace, stop, refused
        self._taken: list[RequestReport] = []
        self._notes: list[str] = []
        self._decoders: dict[tuple[bool, bool | None, bool | None], Callable[[list[int]], str]] = {}

    def event(self, event: TraceEvent) -> list[UserReply]:
        """Apply one event; the replies the manager gave (one, or two for tokens then abort)."""
        report = self.live.get(event.uid)
        opening = None
        if report is None:
            how = self._ended.get(event.uid)
            if how == "stop" and event.prompt is None and event.options is None:
                self.summary.ignored_after_stop += 1
            elif how in ("stop", "trace"):
                self.summary.with_input_errors += 1
                self._notes.append(f"{self.at(event.line)}: event for request {event.uid!r} after it ended")
            if how is not None:
                return []  # (a refused request's events are skipped: its refusal was noted)
            params = event.options if event.options is not None else self.defaults
            try:
                report = self._open(event.uid, event.prompt or (), params, event.line)
            except ValueError as refused:  # options the manager refuses (more stop strings than it takes)
                self.summary.with_input_errors += 1
                self._notes.append(
                    f"{self.at(event.line)}: request {event.uid!r} refused, its events skipped: {refused}"
                )
                self._remember(event.uid, "refused")
                return []
            self.live[event.uid] = report
            # A trace is a recording: a uid's first event opens its request (the manager itself
            # opens nothing implicitly).
            opening = Opening(report.prompt, params)
        report.events += 1
        streamed = report.length
        replies = []
        if not event.abort or event.tokens or opening is not None:
            valid, error = valid_ids(event.tokens, id_limit(report.codec))
            if error is not None:
                report.errors.append(f"{self.at(event.line)}: {error}")
            msg = DetokenizeMsg(event.uid, valid, event.finished, opening)
            replies.append(self.manager.handle([msg])[0])
            report.count += len(valid)
            if report.reference is None:
                report.ids.extend(valid)
            else:
                report.reference.add(valid)
        if event.abort:
            replies.extend(self.manager.abort([event.uid]))
        for reply in replies:
            if reply.finished and report.uid in self.live:
                report.ended_by_trace = event.finished or event.abort
            self._take(report, reply, event.line)
        if report.uid in self.live:
            prompt = 2 * len(report.prompt) if report.events == 1 else 0  # its ids and about its text
            self._check_so_far(report, prompt + len(event.tokens) + report.length - streamed)
        return replies

    def at(self, line: int) -> str:
        """Where line ``line`` of the trace is, as messages name it."""
        return f"line {line}" if self.trace_name is None else f"{self.trace_name}:{line}"

    def skip_line(self, error: TraceError) -> None:
        """Count a line that is not a valid event (:func:`~puredetok_audit.replay._trace.trace_items`
        gives it), and note it as an input error.
        """
        self.summary.bad_lines += 1
        self._notes.append(f"{self.at(error.line)}: {error.why}")

    def _open(self, uid: Uid, given: tuple[Any, ...], params: SamplingParams, line: int) -> RequestReport:
        """A request's record; raises ValueError for options the manager refuses."""
        codec, rules = self.manager.codec_of(params), self.manager.rules(params)
        prompt, error = valid_ids(given, id_limit(codec), "prompt")
        report = RequestReport(uid, prompt, params, codec)
        if error is not None:
            report.errors.append(f"{self.at(line)}: {error}")
        if self.whole or not codec.exact:
            return report
        report.keep_text = self.keep_text
        report.reference = Reference(codec, rules, prompt, params.stop)
        return report

    @property
    def ended(self) -> tuple[RequestReport, ...]:
        """The requests that ended since the last :meth:`take_ended` (not yet handed out)."""
        return tuple(self._taken)

    def take_ended(self) -> list[RequestReport]:
        """The requests that ended (and were checked) since the last call; they are then forgotten."""
        ended, self._taken = self._taken, []
        return ended

    def take_notes(self) -> list[str]:
        """Input errors about events that came after their request ended, since the last call."""
        notes, self._notes = self._notes, []
        return notes

    def close_all(self) -> list[UserReply]:
        """End the requests still open at the end of the trace (as if finished there)."""
        replies = []
        for uid, report in list(self.live.items()):
            report.closed_at_end = True
            reply = self.manager.handle([DetokenizeMsg(uid, (), True)])[0]
            self._take(report, reply, 0)
            replies.append(reply)
        return replies

    def _take(self, report: RequestReport, reply: UserReply, line: int) -> None:
        if report.uid not in self.live:
            return
        if reply.error is not None:
            report.errors.append(f"{self.at(line)}: {reply.error}")
        delta = reply.incremental_output
        if delta:
            if report.reference is not None:
                report.reference.aligned.add(engine=delta)
            elif "\ufffd" in delta:
                report.fffd.extend(report.length + i for i, char in enumerate(delta) if char == "\ufffd")
            if report.keep_text:
                report.pieces.append(delta)
                if len(report.pieces) > 64:
                    report.pieces[:] = ["".join(report.pieces)]
            report.length += len(delta)
        if reply.finished:
            report.finish_reason, report.matched = reply.finish_reason, reply.matched_stop
            del self.live[report.uid]
            self._remember(report.uid, "trace" if report.ended_by_trace else "stop")
            self.verify(report)
            self.summary.count(report)
            self._taken.append(report)

    def _remember(self, uid: Uid, how: str) -> None:
        ended = self._ended
        ended[uid] = how
        ended.move_to_end(uid)
        while len(ended) > self.remember_ended:
            ended.popitem(last=False)

    def _decode(self, report: RequestReport, ids: Sequence[int]) -> str:
        """The oracle: the tokenizer's own decode of ``prompt + ids``, with the request's options."""
        params, every = report.params, [*report.prompt, *ids]
        text = self._decode_ids(params, every)
        self.work += len(every) + len(text)
        return text

    def _decode_ids(self, params: SamplingParams, every: list[int]) -> str:
        key = (
            params.skip_special_tokens,
            params.clean_up_tokenization_spaces,
            params.spaces_between_special_tokens,
        )
        decode = self._decoders.get(key)
        if decode is None:
            decode = self._decoders[key] = reference_decode(
                self.tokenizer,
                skip_special_tokens=key[0],
                clean_up_tokenization_spaces=key[1],
                spaces_between_special_tokens=key[2],
            )
        return str(decode(every))

    def _continuation(self, report: RequestReport, ids: Sequence[int]) -> str:
        """Contract C: ``decode(prompt + ids)`` after its longest common prefix with ``decode(prompt)``."""
        full = self._decode(report, ids)
        if not report.prompt:
            return full
        if report.prompt_text is None:
            report.prompt_text = self._decode(report, ())
        self.work += len(report.prompt_text)
        return full[common_prefix(report.prompt_text, full) :]

    def _check_so_far(self, report: RequestReport, received: int) -> None:
        """G2 while the request runs, when its credit allows: the text so far is a prefix of the
        expected text of the ids so far. ``received`` ids and characters just came in; each adds
        :data:`CHECK_FACTOR` to the request's credit, and a check spends what it decodes and
        compares (so checks grow rarer as the request grows, and cost a bounded share overall).
        """
        reference = report.reference
        if reference is not None:
            if report.checks["G2"] is not False:
                before = reference.work
                if not reference.aligned.agrees_so_far(reference.last + finish(reference.state)):
                    report.fail("G2", f"after {report.count} ids the text is not a prefix of their decode")
                self.work += reference.work - before
            return
        report.credit += CHECK_FACTOR * received
        estimate = 2 * (len(report.prompt) + len(report.ids) + report.length)
        if report.checks["G2"] is False or report.credit < estimate:
            return
        before = self.work
        so_far = self._continuation(report, report.ids)
        text = report.text
        self.work += len(text)
        if not so_far.startswith(text):
            report.fail("G2", f"after {len(report.ids)} ids the text is not a prefix of their decode")
        report.credit -= self.work - before

    def verify(self, report: RequestReport) -> None:
        """Run the final checks of one ended request."""
        if report.reference is not None:
            self._verify_streamed(report, report.reference)
            return
        consumed = report.decoded = self._consumed(report)
        reference = self._continuation(report, report.ids[:consumed])
        text = report.text
        self.work += len(text)
        if not reference.startswith(text):
            report.fail("G2", "the text is not a prefix of the final decode")
        if any(position >= len(reference) or reference[position] != "\ufffd" for position in report.fffd):
            report.fail("G4", "a U+FFFD was sent where the final decode has none")
        if report.finish_reason == "abort":
            report.checks["G1"] = None
            return
        wanted, searched = self._cut(report, text, reference, consumed)
        if text != wanted:
            report.fail("G1", f"the text differs from the decode ({len(text)} vs {len(wanted)} characters)")
        elif not report.params.min_tokens:
            self.work += len(searched) * len(report.params.stop)
            early = [stop for stop in report.params.stop if stop in searched]
            if early:
                report.fail("G1", f"the stop string {early[0]!r} completes before the text ends")

    def _verify_streamed(self, report: RequestReport, reference: Reference) -> None:
        """:meth:`verify` of a request compared as it ran: the same checks, the same findings."""
        before_work = reference.work
        report.decoded = reference.consumed
        tail = reference.last + finish(reference.state)
        full = reference.aligned.end(tail)
        if full.differs is not None:
            report.fail("G2", "the text is not a prefix of the final decode")
        if full.fffd_elsewhere:
            report.fail("G4", "a U+FFFD was sent where the final decode has none")
        if report.finish_reason == "abort":
            report.checks["G1"] = None
            self.work += reference.work - before_work
            return
        length, matched = full.engine_length, report.matched
        stopped = report.finish_reason == "stop" and matched is not None
        include = report.params.include_stop_str_in_output
        equal = full.differs is None and length == full.reference_length
        wanted, searched, limit = full.reference_length, tail, full.reference_length
        if stopped and isinstance(matched, int):  # a stop or EOS token: its own text only if included
            searched = finish(reference.before)
            cut = reference.aligned.end(searched)
            limit = cut.reference_length
            if not include:
                equal = cut.differs is None and length == cut.reference_length
                wanted = cut.reference_length
        elif stopped and isinstance(matched, str):  # the text ends just before it (or after it)
            end = length if include else length + len(matched)
            until = min(end, full.reference_length)
            at = until - len(matched) - (full.reference_length - len(full.around))
            if until >= len(matched) and at >= 0 and full.around[at : at + len(matched)] == matched:
                equal, wanted = full.differs is None, min(length, full.reference_length)
                limit = min(end - 1, full.reference_length)
            else:
                equal, wanted = False, full.reference_length + 1
        if not equal:
            report.fail("G1", f"the text differs from the decode ({length} vs {wanted} characters)")
        elif not report.params.min_tokens:
            ends = reference.finder.ends_with(searched)
            early = [stop for stop in report.params.stop if (ends.get(stop) or limit + 1) <= limit]
            if early:
                report.fail("G1", f"the stop string {early[0]!r} completes before the text ends")
        self.work += reference.work - before_work

    def _cut(self, report: RequestReport, text: str, reference: str, consumed: int) -> tuple[str, str]:
        """Where the final text must end, from the decode alone; and the text in which no stop
        string may complete (everything before the end the stop rules chose).
        """
        matched, include = report.matched, report.params.include_stop_str_in_output
        if report.finish_reason != "stop" or matched is None:
            return reference, reference
        if isinstance(matched, int):  # a stop or EOS token: its own text only if included
            before = self._continuation(report, report.ids[: consumed - 1])
            return (reference if include else before), before
        # A stop string: the text ends just before it (or after it, if included).
        end = len(text) if include else len(text) + len(matched)
        if reference[:end].endswith(matched):
            return reference[: end if include else end - len(matched)], reference[: end - 1]
        return reference + "\x00", ""  # the matched string is not where the text ends: G1 fails

    def _consumed(self, report: RequestReport) -> int:
        """How many of its ids the request consumed: stepping them through the stop rules, up to
        the one that ended it (the ids a scheduler sent after that are not its text).
        """
        stream = open_stream(report.codec, self.manager.rules(report.params), report.prompt)
        consumed = 0
        while consumed < len(report.ids) and stream.finish_reason is None:
            stream, _ = advance(stream, report.ids[consumed])
            consumed += 1
        return consumed


def id_limit(codec: Codec) -> int:
    """Ids from here on are invalid for ``codec``."""
    return ID_LIMIT if codec.out_of_vocab == "ignore" else codec.vocab_size
