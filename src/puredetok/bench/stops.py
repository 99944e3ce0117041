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
from puredetok.bench.timing import Result, ratio_result, repeated
from puredetok.core import Codec, codec_for, feed, finish, start
from puredetok.serving.eos import eos_token_ids
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


MIN_TOKENS = 16
"""The serving rows' ``min_tokens``."""


def serving_rules(tokenizer: Any, tokens: int, limit: bool) -> StopRules:
    """The rules engines serve with: 4 stop strings, the tokenizer's EOS ids (never in the trace),
    ``min_tokens`` and, if ``limit``, ``max_new_tokens`` (past the trace, so that the stream runs
    to its end).
    """
    return StopRules(
        stop=STOPS,
        eos_token_ids=eos_token_ids(tokenizer),
        min_tokens=MIN_TOKENS,
        max_new_tokens=tokens + 1 if limit else None,
    )


def stops_section(tokenizer: Any, tokens: int = 20_000, repeats: int = 3) -> list[Result]:
    """Per-token cost of the stop layer relative to the core with the serving parameters, one
    token and 64 ids per call (ratios over ``repeats`` repeats).
    """
    codec = codec_for(tokenizer)
    ids = trace_ids(tokenizer, tokens)
    only_stops = StopRules(stop=STOPS)
    serving = serving_rules(tokenizer, tokens, limit=False)
    limited = serving_rules(tokenizer, tokens, limit=True)
    for rules in (only_stops, serving, limited):
        _check_no_stop_fires(codec, rules, ids)
    step_name, feed_name = "core step (no stops)", f"core feed, {CHUNK} ids per call"
    runs = [
        (step_name, stepper(codec, ids)),
        ("advance, 4 stop strings", _advancer(codec, only_stops, ids)),
        ("advance, 4 stops + EOS + min_tokens", _advancer(codec, serving, ids)),
        ("advance, + max_new_tokens", _advancer(codec, limited, ids)),
        (feed_name, feeder(codec, ids, CHUNK)),
        (f"advance_many, {CHUNK} ids, + EOS, min/max", _batcher(codec, limited, ids)),
    ]
    # More rounds than elsewhere: the per-token paths are short, so one noisy moment on a shared
    # machine moves a single round by more than the margin the target is judged by.
    samples = repeated(runs, tokens, 9, repeats)
    return [
        ratio_result(step_name, samples, step_name),
        ratio_result(runs[1][0], samples, step_name, "<= 1.5 x core step", 1.5),
        ratio_result(runs[2][0], samples, step_name, "<= 1.5 x core step", 1.5),
        ratio_result(runs[3][0], samples, step_name, "<= 2.0 x core step", 2.0),
        ratio_result(feed_name, samples, feed_name),
        ratio_result(runs[5][0], samples, feed_name),
    ]
