"""Replaying a token trace through the :class:`DetokenizeManager`, checking every request.

Each request's streamed text is checked against ``tokenizer.decode`` itself (the oracle):

- **G1 exact**: the final text equals the decode of the prompt and the ids the request consumed,
  minus the prompt's stable prefix (contract C: no prompt text, nothing lost); when a stop rule
  ended it, the text is cut exactly there (before or after the stop string or token, as
  ``include_stop_str_in_output`` says), and it equals the non-streaming result of the same ids.
- **G2 prefix-safe**: after every event, the text so far is a prefix of the decode of what has
  arrived so far, and of the final decode.
- **G4 no transient U+FFFD**: every U+FFFD ever sent stands where the final decode has one.

An aborted request has no final text to compare: G1 does not apply, G2 and G4 do.
"""

from __future__ import annotations

__all__ = ["Replayer", "RequestReport", "CHECKS"]

from collections.abc import Sequence
from typing import Any

import attrs

from puredetok.adapters.detokenize_manager import DetokenizeManager
from puredetok.adapters.messages import DEFAULT_PARAMS, DetokenizeMsg, Opening, SamplingParams, Uid, UserReply
from puredetok.adapters.trace import TraceEvent
from puredetok.core import Codec, finish, start
from puredetok.core.decoders.cleanup import TRANSFORMERS_RULES, apply_rules
from puredetok.stops import advance, advance_many, close, open_stream

CHECKS = ("G1", "G2", "G4")
"""The guarantees checked per request."""


@attrs.define
class RequestReport:
    """What happened to one request of the trace, and what the checks found."""

    uid: Uid
    prompt: tuple[int, ...]
    params: SamplingParams
    codec: Codec
    ids: list[int] = attrs.field(factory=list)
    """The valid ids it was sent (invalid ones are skipped, as the manager skips them)."""
    text: str = ""
    fffd: list[int] = attrs.field(factory=list)
    """Positions in ``text`` of every U+FFFD that was sent."""
    events: int = 0
    finish_reason: str | None = None
    matched: str | int | None = None
    closed_at_end: bool = False
    ended_by_trace: bool = False
    """Whether the trace itself ended it (``finished`` or ``abort``), rather than a stop rule."""
    ignored: int = 0
    """Events that arrived after a stop rule had ended it (expected: the scheduler had not heard yet)."""
    errors: list[str] = attrs.field(factory=list)
    """Input errors (invalid ids, events after the end), not check failures."""
    checks: dict[str, bool | None] = attrs.field(factory=lambda: dict.fromkeys(CHECKS, True))
    failures: list[str] = attrs.field(factory=list)
    """Why a check failed."""

    @property
    def ok(self) -> bool:
        """No check failed."""
        return not self.failures

    def fail(self, check: str, why: str) -> None:
        """Record a failed check."""
        self.checks[check] = False
        self.failures.append(f"{check}: {why}")


class Replayer:
    """Feeds trace events to a :class:`DetokenizeManager` and checks each request when it ends.

    ``defaults`` are the options of requests whose first event has none; ``codecs`` may share
    codecs with other managers of the same tokenizer (see :class:`DetokenizeManager`).
    """

    def __init__(
        self,
        tokenizer: Any,
        defaults: SamplingParams = DEFAULT_PARAMS,
        *,
        codecs: dict[tuple[bool, bool | None], Codec] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.defaults = defaults
        self.manager = DetokenizeManager(tokenizer, defaults=defaults, codecs=codecs)
        self.requests: dict[Uid, RequestReport] = {}
        self._live: dict[Uid, RequestReport] = {}
        self._ended: list[RequestReport] = []

    def event(self, event: TraceEvent) -> list[UserReply]:
        """Apply one event; the replies the manager gave (one, or two for tokens then abort)."""
        report = self._live.get(event.uid)
        opening = None
        if report is None:
            if event.uid in self.requests:
                report = self.requests[event.uid]
                if not report.ended_by_trace and event.prompt is None and event.options is None:
                    report.ignored += 1
                    return []
                report.errors.append(f"line {event.line}: event after the request ended")
            else:
                params = event.options if event.options is not None else self.defaults
                codec = self.manager.codec(params.skip_special_tokens, params.clean_up_tokenization_spaces)
                report = RequestReport(event.uid, event.prompt or (), params, codec)
                self.requests[event.uid] = self._live[event.uid] = report
                if event.prompt is not None or event.options is not None:
                    opening = Opening(event.prompt or (), params)
        report.events += 1
        replies = []
        if not event.abort or event.tokens or opening is not None:
            msg = DetokenizeMsg(event.uid, event.tokens, event.finished, opening)
            replies.append(self.manager.handle([msg])[0])
            if event.uid in self._live:
                size = report.codec.vocab_size
                report.ids.extend(t for t in event.tokens if type(t) is int and 0 <= t < size)
        if event.abort:
            replies.extend(self.manager.abort([event.uid]))
        for reply in replies:
            if reply.finished and report.uid in self._live:
                report.ended_by_trace = event.finished or event.abort
            self._take(report, reply, event.line)
        return replies

    def take_ended(self) -> list[RequestReport]:
        """The requests that ended (and were checked) since the last call."""
        ended, self._ended = self._ended, []
        return ended

    def close_all(self) -> list[UserReply]:
        """End the requests still open at the end of the trace (as if finished there)."""
        replies = []
        for uid, report in list(self._live.items()):
            report.closed_at_end = True
            reply = self.manager.handle([DetokenizeMsg(uid, (), True)])[0]
            self._take(report, reply, 0)
            replies.append(reply)
        return replies

    def _take(self, report: RequestReport, reply: UserReply, line: int) -> None:
        if report.uid not in self._live:
            return
        if reply.error is not None:
            report.errors.append(f"line {line}: {reply.error}")
        delta = reply.incremental_output
        base = len(report.text)
        report.fffd.extend(base + i for i, char in enumerate(delta) if char == "\ufffd")
        report.text += delta
        if reply.finished:
            report.finish_reason, report.matched = reply.finish_reason, reply.matched_stop
            del self._live[report.uid]
            self.verify(report)
            self._ended.append(report)
        elif not reply.finished:
            self._check_prefix(report)

    def _decode(self, report: RequestReport, ids: Sequence[int]) -> str:
        """The oracle: the tokenizer's own decode of ``prompt + ids``, with the request's options."""
        params, every = report.params, [*report.prompt, *ids]
        if hasattr(self.tokenizer, "backend_tokenizer"):
            return str(
                self.tokenizer.decode(
                    every,
                    skip_special_tokens=params.skip_special_tokens,
                    clean_up_tokenization_spaces=params.clean_up_tokenization_spaces,
                )
            )
        text = str(self.tokenizer.decode(every, skip_special_tokens=params.skip_special_tokens))
        return apply_rules(TRANSFORMERS_RULES, text) if params.clean_up_tokenization_spaces else text

    def _stable_prompt(self, report: RequestReport) -> str:
        """The prompt's text that no continuation can change (what is never sent)."""
        if not report.prompt:
            return ""
        whole = self._decode(report, ())
        held = finish(start(report.codec, report.prompt))
        return whole[: len(whole) - len(held)]

    def _continuation(self, report: RequestReport, ids: Sequence[int]) -> str | None:
        """``decode(prompt + ids)`` after the stable prompt text; None if that prefix changed."""
        full, stable = self._decode(report, ids), self._stable_prompt(report)
        return full[len(stable) :] if full.startswith(stable) else None

    def _check_prefix(self, report: RequestReport) -> None:
        """G2 while the request runs: the text so far is a prefix of the decode so far."""
        if report.checks["G2"] is False:
            return
        so_far = self._continuation(report, report.ids)
        if so_far is None or not so_far.startswith(report.text):
            report.fail("G2", f"after {len(report.ids)} ids the text is not a prefix of their decode")

    def verify(self, report: RequestReport) -> None:
        """Run the final checks of one ended request."""
        consumed, expected = self._non_streaming(report)
        reference = self._continuation(report, report.ids[:consumed])
        if reference is None:
            report.fail("G1", "the prompt's stable text is not a prefix of the full decode")
            return
        text = report.text
        if not reference.startswith(text):
            report.fail("G2", "the text is not a prefix of the final decode")
        if any(position >= len(reference) or reference[position] != "\ufffd" for position in report.fffd):
            report.fail("G4", "a U+FFFD was sent where the final decode has none")
        if report.finish_reason == "abort":
            report.checks["G1"] = None
            return
        if text != expected:
            report.fail("G1", "the streamed text differs from the non-streaming text of the same ids")
        wanted = self._cut(report, reference, consumed)
        if text != wanted:
            report.fail("G1", f"the text differs from the decode ({len(text)} vs {len(wanted)} characters)")

    def _cut(self, report: RequestReport, reference: str, consumed: int) -> str:
        """Where the final text must end, from the decode alone."""
        matched, include = report.matched, report.params.include_stop_str_in_output
        if report.finish_reason != "stop" or matched is None:
            return reference
        if isinstance(matched, int):  # a stop or EOS token: its own text only if included
            before = self._continuation(report, report.ids[: consumed - 1])
            return reference if include or before is None else before
        # A stop string: the text ends just before it (or after it, if included).
        end = len(report.text) if include else len(report.text) + len(matched)
        if reference[:end].endswith(matched):
            return reference[: end if include else end - len(matched)]
        return reference + "\x00"  # the matched string is not where the text ends: G1 fails

    def _non_streaming(self, report: RequestReport) -> tuple[int, str]:
        """How many ids the request consumed (stepping one by one), and its text computed from all
        its ids at once.
        """
        opened = open_stream(report.codec, self.manager.rules(report.params), report.prompt)
        stream, consumed = opened, 0
        while consumed < len(report.ids) and stream.finish_reason is None:
            stream, _ = advance(stream, report.ids[consumed])
            consumed += 1
        stream, text = advance_many(opened, report.ids)
        stream, tail = close(stream)
        return consumed, text + tail
