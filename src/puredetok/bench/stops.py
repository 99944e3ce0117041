"""The stop layer's benchmark: ``advance`` against the core's ``step`` on the same trace.

Four stop strings of up to 16 characters that never match the trace, though three of their first
characters (newline, "#", "[") occur in it, so that the hold-and-release path runs as it would in a
chat stream.
"""

from __future__ import annotations

__all__ = ["stops_section", "STOPS"]

from collections.abc import Callable
from typing import Any

from puredetok.bench.core import feeder, stepper, trace_ids
from puredetok.bench.timing import Result, compare
from puredetok.core import Codec, codec_for, feed, finish, start
from puredetok.stops import StopRules, Stream, advance, advance_many, close, open_stream

STOPS = ("\n\nObservation:", "### Instruction:", "<|user|>", "[END OF ANSWER]")
"""Realistic stop strings (a ReAct observation, an Alpaca header, a chat turn, a marker)."""

CHUNK = 64
"""Ids per call for the batched lines."""


def _advancer(codec: Codec, rules: StopRules, ids: list[int]) -> Callable[[], object]:
    def run() -> None:
        stream = open_stream(codec, rules)
        for token_id in ids:
            stream, _ = advance(stream, token_id)

    return run


def _batcher(codec: Codec, rules: StopRules, ids: list[int]) -> Callable[[], object]:
    chunks = [ids[i : i + CHUNK] for i in range(0, len(ids), CHUNK)]

    def run() -> None:
        stream = open_stream(codec, rules)
        for part in chunks:
            stream, _ = advance_many(stream, part)

    return run


def _check_no_stop_fires(codec: Codec, rules: StopRules, ids: list[int]) -> None:
    """The measured streams must run to the end and give the core's text (else the figures lie)."""
    state, core_text = feed(start(codec), ids)
    stream: Stream = open_stream(codec, rules)
    stream, text = advance_many(stream, ids)
    stream, tail = close(stream)
    if text + tail != core_text + finish(state) or stream.finish_reason is None:
        raise AssertionError("a benchmark stop string fired on the trace")
    if stream.finish_reason.kind != "length":
        raise AssertionError(f"the benchmark stream ended early: {stream.finish_reason}")


def stops_section(tokenizer: Any, tokens: int = 20_000) -> list[Result]:
    """Per-token cost of the stop layer relative to the core, one token and 64 ids per call."""
    codec = codec_for(tokenizer)
    ids = trace_ids(tokenizer, tokens)
    eos = frozenset({codec.vocab_size - 1})  # never in the trace
    only_stops = StopRules(stop=STOPS)
    with_limits = StopRules(stop=STOPS, eos_token_ids=eos, max_new_tokens=tokens + 1, min_tokens=1)
    for rules in (only_stops, with_limits):
        _check_no_stop_fires(codec, rules, ids)
    runs = [
        ("core step (no stops)", stepper(codec, ids)),
        ("advance, 4 stop strings", _advancer(codec, only_stops, ids)),
        ("advance, + EOS, min/max tokens", _advancer(codec, with_limits, ids)),
        (f"core feed, {CHUNK} ids per call", feeder(codec, ids, CHUNK)),
        (f"advance_many, {CHUNK} ids, 4 stop strings", _batcher(codec, only_stops, ids)),
        (f"advance_many, {CHUNK} ids, + EOS, min/max", _batcher(codec, with_limits, ids)),
    ]
    # More rounds than elsewhere: the per-token paths are short, so one noisy moment on a shared
    # machine moves a single round by more than the margin the target is judged by.
    best = compare(runs, tokens, rounds=15)
    results = []
    for name, _ in runs:
        if name.startswith("core"):
            base = best[name]
            results.append(Result(name, base, 1.0))
            continue
        ratio = best[name] / base
        if name.endswith("4 stop strings"):  # the target of issue 4
            against = "step" if name.startswith("advance,") else "feed"
            results.append(Result(name, best[name], ratio, f"<= 1.5 x core {against}", ratio <= 1.5))
        else:  # token limits cost one new record per token: shown, not held to the target
            results.append(Result(name, best[name], ratio))
    return results
