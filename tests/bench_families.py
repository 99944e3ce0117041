"""Benchmark for docs/families.md and docs/benchmarks.md (a script, not a test):

    .venv/bin/python tests/bench_families.py step     # per-token cost, exact codec vs fallback
    .venv/bin/python tests/bench_families.py build    # codec_for's cost per tokenizer

``step`` runs, side by side (interleaved rounds, best of each), ``step`` through the codec of each
tokenizer and through its generic fallback (``codec_for(..., window=True)``) over the ids of the
mixed-script trace text, and prints both and their ratio. ``build`` times ``codec_for`` (best of
three) for the real tokenizers; run it with ``PYTHONPATH`` pointing at another checkout's ``src``
to compare builds before and after a change.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import families
import helpers
import puredetok
from puredetok.bench.timing import TEXT, compare


def _trace(tokenizer: Any, count: int) -> list[int]:
    ids = [int(i) for i in tokenizer.encode(TEXT, add_special_tokens=False)]
    return (ids * (count // max(1, len(ids)) + 1))[:count]


def _stepper(codec: puredetok.Codec, ids: list[int]) -> Callable[[], None]:
    def run() -> None:
        state = puredetok.start(codec)
        for token_id in ids:
            state, _ = puredetok.step(state, token_id)

    return run


def _sources() -> dict[str, Callable[[], Any]]:
    real = {name: (lambda name=name: helpers.tokenizer(name)) for name in helpers.TOKENIZERS}
    return {**real, **families.FAMILIES}


def step_costs(tokens: int = 3000) -> None:
    """Exact codec and fallback per token, side by side, for every tokenizer."""
    print(f"{'tokenizer':<22} {'family':<28} {'exact ns':>9} {'fallback ns':>12} {'ratio':>6}")
    for name, build in _sources().items():
        tokenizer = build()
        ids = _trace(tokenizer, tokens)
        exact = puredetok.codec_for(tokenizer)
        window = puredetok.codec_for(tokenizer, window=True)
        best = compare(
            [("exact", _stepper(exact, ids)), ("window", _stepper(window, ids))], len(ids), rounds=3
        )
        ratio = best["window"] / best["exact"]
        print(
            f"{name:<22} {exact.family:<28} {best['exact']:>9.0f} {best['window']:>12.0f} {ratio:>6.1f}",
            flush=True,
        )


def build_costs() -> None:
    """codec_for, best of three, per real tokenizer."""
    for name in helpers.TOKENIZERS:
        tokenizer = helpers.tokenizer(name)
        best = float("inf")
        for _ in range(3):
            began = time.perf_counter()
            puredetok.codec_for(tokenizer)
            best = min(best, time.perf_counter() - began)
        print(f"{name:<24} {len(tokenizer):>7} ids  {best:.3f} s", flush=True)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "step"
    if what == "build":
        build_costs()
    elif what == "step":
        step_costs()
    else:
        sys.exit("usage: bench_families.py step|build")
