"""What opening a stream after a prompt costs: ``python -m benchmarks.opening [NAME=PATH ...]``.

Per request, side by side in one run: the old opening, which fed every prompt id and then
finished to find the echo (contract C), and :func:`puredetok.start`, which reads the prompt
from its end only as far back as the decoding model needs (``Decoding.tail_start``). Prompts of
16, 1,024 and 32,768 ids of the mixed-script trace (:func:`puredetok.cli._measure.trace_ids`).

Both are timed in CPU time of this thread (on a shared machine, wall time takes in the other
jobs), interleaved, best of the rounds of each repeat; the ratio new / old is shown as its range
over the repeats, with the ids the new opening read (scanned from the end, then fed).
"""

from __future__ import annotations

__all__ = ["LENGTHS", "full_feed_opening", "opening_rows", "main"]

import argparse
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from puredetok import Codec, DecodeState, codec_for, feed, finish, start
from puredetok.cli._measure import trace_ids

LENGTHS = (16, 1_024, 32_768)
"""Prompt lengths, in ids."""
_WORK = 400_000
"""Prompt ids one timed run of the old opening feeds (runs of a short prompt open it many times)."""
_NEW = 5_000
"""Openings in one timed run of the new opening (its cost does not grow with the prompt)."""


def full_feed_opening(codec: Codec, prompt: Sequence[int]) -> tuple[DecodeState, str]:
    """The old opening's work: feed every id of the prompt, then finish to find the echo (the
    state and the echo, which the old opening then kept together as the hold).
    """
    state, _ = feed(DecodeState(codec, codec.decoding.initial), list(prompt))
    return state, finish(state)


def _same(codec: Codec, prompt: list[int]) -> bool:
    """Whether the new opening's hold is the old one's (with the echo beside it, if any)."""
    state, echo = full_feed_opening(codec, prompt)
    hold: Any = start(codec, prompt).hold
    return (hold.hold, hold.text) == (state.hold, echo) if echo else bool(hold == state.hold)


def _cpu_ns(run: Callable[[], object]) -> int:
    began = time.thread_time_ns()
    run()
    return time.thread_time_ns() - began


def _best(codec: Codec, prompt: list[int], rounds: int) -> tuple[float, float]:
    """Best CPU ns per opening of the old and of the new opening, interleaved."""
    count = max(1, _WORK // len(prompt))

    def old() -> None:
        for _ in range(count):
            full_feed_opening(codec, prompt)

    def new() -> None:
        for _ in range(_NEW):
            start(codec, prompt)

    best_old = best_new = float("inf")
    for _ in range(rounds):
        best_old = min(best_old, _cpu_ns(old) / count)
        best_new = min(best_new, _cpu_ns(new) / _NEW)
    return best_old, best_new


def opening_rows(label: str, tokenizer: Any, repeats: int = 3, rounds: int = 5) -> list[str]:
    """One markdown row per prompt length for one tokenizer."""
    codec = codec_for(tokenizer)
    trace = trace_ids(tokenizer, max(LENGTHS))
    rows = []
    for length in LENGTHS:
        prompt = trace[-length:]
        if not _same(codec, prompt):
            raise AssertionError(f"{label}: the openings differ after {length} ids")
        position, _ = codec.decoding.tail_start(prompt)
        read = min(length, length - position + 1)
        samples = [_best(codec, prompt, rounds) for _ in range(max(1, repeats))]
        ratios = sorted(new / old for old, new in samples)
        old_us = min(old for old, _ in samples) / 1e3
        new_us = min(new for _, new in samples) / 1e3
        rows.append(
            f"| {label} | {length:,} | {read} | {old_us:.2f} | {new_us:.2f} "
            f"| {ratios[0]:.4f} - {ratios[-1]:.4f} |"
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table for ``NAME=PATH`` tokenizers (default: the embedded Qwen3)."""
    from puredetok.serving._loading import load_tokenizer

    parser = argparse.ArgumentParser(prog="python -m benchmarks.opening", description=__doc__)
    parser.add_argument("tokenizers", nargs="*", metavar="NAME=PATH", help="tokenizers to measure")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the whole (ratio range)")
    args = parser.parse_args(argv)
    named = dict(item.split("=", 1) for item in args.tokenizers) or {"Qwen3": ""}
    print(f"load average: {os.getloadavg()[0]:.2f}; CPU time of this thread, best of 5 rounds")
    print(
        "| tokenizer | prompt ids | ids read (new) | old: full feed (us) | new: tail (us) "
        "| new / old (range) |\n|---|---:|---:|---:|---:|---:|"
    )
    for label, path in named.items():
        print("\n".join(opening_rows(label, load_tokenizer(path or None), args.repeats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
