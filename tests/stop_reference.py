"""A plain, non-streaming reference for the stop layer, written from the rules in docs/stops.md.

It decodes the kept ids in one go with the tokenizer itself and cuts the text at the first stop
string; it shares no code with ``puredetok.stops``. Only where the rules refer to "the text of the
first ``min_tokens`` tokens" does it ask the core what those tokens released (the core's own
exactness is checked in test_guarantees.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from puredetok import FinishReason, StopRules, feed, start
from sources import Source


def earliest_stop(text: str, stops: Iterable[str], after: int) -> tuple[int, int, str] | None:
    """``(end, start, stop)`` of the occurrence that ends first, after position ``after``; of those
    ending at the same place, the one starting first."""
    best: tuple[int, int, str] | None = None
    for stop in set(stops):
        for begin in range(len(text) - len(stop) + 1):
            end = begin + len(stop)
            if end > after and text[begin:end] == stop and (best is None or (end, begin) < best[:2]):
                best = (end, begin, stop)
    return best


def longest_hold(text: str, stops: Iterable[str]) -> str:
    """The longest suffix of ``text`` that is a proper prefix of some stop string."""
    for size in range(min(len(text), max(map(len, stops), default=0)), 0, -1):
        suffix = text[-size:]
        if any(len(stop) > size and stop.startswith(suffix) for stop in stops):
            return suffix
    return ""


def expected(
    source: Source, skip: bool, ids: Sequence[int], rules: StopRules, prompt: Sequence[int] = ()
) -> tuple[str, FinishReason]:
    """The whole output text and finish reason for ``ids`` (then no more tokens)."""
    ending = rules.stop_token_ids | (frozenset() if rules.ignore_eos else rules.eos_token_ids)
    limit = len(ids) if rules.max_new_tokens is None else min(len(ids), rules.max_new_tokens)
    stop_at = next((i for i in range(rules.min_tokens, limit) if ids[i] in ending), None)
    if stop_at is None:
        kept, consumed = list(ids[:limit]), limit
    else:
        kept = list(ids[: stop_at + 1] if rules.include_stop_str_in_output else ids[:stop_at])
        consumed = stop_at + 1
    c = source.codec(skip)
    text = source.continuation(prompt, kept, skip)  # contract C: the prompt's text is never output
    if consumed >= rules.min_tokens:
        _, unsearched = feed(start(c, prompt), ids[: rules.min_tokens])
        hit = earliest_stop(text, rules.stop, len(unsearched))
        if hit is not None:
            end, begin, stop = hit
            return text[: end if rules.include_stop_str_in_output else begin], FinishReason("stop", stop)
    if stop_at is not None:
        return text, FinishReason("stop", ids[stop_at])
    return text, FinishReason("length")
