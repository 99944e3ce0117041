"""The core's benchmark: ``step`` and ``feed`` against ``DecodeStream`` and the two-window algorithm."""

from __future__ import annotations

__all__ = ["core_section", "trace_ids", "byte_run_section", "stepper", "feeder"]

import pickle
from collections.abc import Callable
from typing import Any

from tokenizers.decoders import DecodeStream

from puredetok.baselines import TwoWindow
from puredetok.bench.timing import TEXT, Result, compare, ratio_result, repeated
from puredetok.core import Codec, DecodeState, codec_for, feed, start, step


def _base_ids(tokenizer: Any) -> list[int]:
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    return list(backend.encode(TEXT, add_special_tokens=False).ids)


def trace_ids(tokenizer: Any, count: int) -> list[int]:
    """``count`` ids of the mixed-script trace text, repeated as needed."""
    base = _base_ids(tokenizer)
    return (base * (count // len(base) + 1))[:count]


def stepper(codec: Codec, ids: list[int]) -> Any:
    """A run that steps a fresh stream through ``ids`` one at a time."""

    def run() -> None:
        state = start(codec)
        for token_id in ids:
            state, _ = step(state, token_id)

    return run


def feeder(codec: Codec, ids: list[int], chunk: int, as_array: bool = False) -> Any:
    """A run that feeds a fresh stream ``ids`` in chunks of ``chunk`` (lists, or NumPy int32
    vectors as an engine's sampler hands them over).
    """
    chunks: list[Any] = [ids[i : i + chunk] for i in range(0, len(ids), chunk)]
    if as_array:
        import numpy

        chunks = [numpy.array(part, dtype=numpy.int32) for part in chunks]

    def run() -> None:
        state = start(codec)
        for part in chunks:
            state, _ = feed(state, part)

    return run


def _decode_stream(backend: Any, ids: list[int]) -> Any:
    def run() -> None:
        stream = DecodeStream(skip_special_tokens=False)
        for token_id in ids:
            stream.step(backend, token_id)

    return run


def _two_window(backend: Any, ids: list[int]) -> Any:
    def run() -> None:
        window = TwoWindow(backend.decode)
        for token_id in ids:
            window.step(token_id)

    return run


SMALL_FEEDS = tuple(range(2, 9))
"""Ids per ``feed`` call as speculative decoding accepts them: each held to <= 1.0 x ``step``."""
FEED_CHUNKS = (16, 64, 256)
"""Larger chunks; at 256 ids per call ``feed`` is held to <= 0.1 x ``DecodeStream``."""
DECODE_STREAM = "DecodeStream.step (tokenizers)"


def core_section(
    tokenizer: Any, tokens: int = 20_000, long: int = 1_000_000, repeats: int = 3
) -> list[Result]:
    """Per-token costs side by side (ratios over ``repeats`` repeats), flatness from 1,000 to
    ``long`` tokens, and state size.
    """
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    codec = codec_for(tokenizer)
    ids = trace_ids(tokenizer, tokens)
    runs = [("step", stepper(codec, ids))]
    runs += [(f"feed, {chunk} ids per call", feeder(codec, ids, chunk)) for chunk in SMALL_FEEDS]
    runs += [(f"feed, {chunk} ids per call", feeder(codec, ids, chunk)) for chunk in FEED_CHUNKS]
    runs += [
        (f"feed, {chunk} ids per call (NumPy int32)", feeder(codec, ids, chunk, True)) for chunk in (256,)
    ]
    runs += [
        (DECODE_STREAM, _decode_stream(backend, ids)),
        ("two-window algorithm (engines)", _two_window(backend, ids)),
    ]
    samples = repeated(runs, tokens, 5, repeats)
    results = [ratio_result("step", samples, DECODE_STREAM, "<= 0.5 x DecodeStream", 0.5)]
    for chunk in SMALL_FEEDS:
        name = f"feed, {chunk} ids per call"
        results.append(ratio_result(name, samples, "step", "<= 1.0 x step", 1.0, label=f"{name} / step"))
    for name, _ in runs[1 + len(SMALL_FEEDS) :]:
        if name.startswith("feed, 256"):
            results.append(ratio_result(name, samples, DECODE_STREAM, "<= 0.1 x DecodeStream", 0.1))
        else:
            results.append(ratio_result(name, samples, DECODE_STREAM))
    results.extend(_flatness(codec, tokenizer, long))
    return results


WINDOW = 1_000
"""Tokens timed after each history length in the flatness lines."""


def _steps_after(state: DecodeState, ids: list[int]) -> Any:
    def run() -> None:
        current = state
        for token_id in ids:
            current, _ = step(current, token_id)

    return run


def _flat_after_history(
    codec: Codec, stream_ids: Callable[[int], list[int]], lengths: list[int], label: str
) -> tuple[list[Result], dict[int, int]]:
    """The per-token cost of the same next tokens after histories of each length (interleaved),
    and the state's pickled size after each history.
    """
    runs, sizes = [], {}
    for n in lengths:
        ids = stream_ids(n + WINDOW)
        state, _ = feed(start(codec), ids[:n])
        sizes[n] = len(pickle.dumps(state.hold))
        runs.append((str(n), _steps_after(state, ids[n:])))
    best = compare(runs, WINDOW, rounds=7)
    low = best[str(lengths[0])]
    results = [
        Result(f"{label}: {WINDOW:,} steps after {n:,} tokens", best[str(n)], best[str(n)] / low)
        for n in lengths
    ]
    spread = max(best.values()) / min(best.values())
    results.append(Result(f"{label}: flatness (slowest / fastest)", 0.0, spread, "<= 1.2", spread <= 1.2))
    return results, sizes


def _flatness(codec: Codec, tokenizer: Any, long: int) -> list[Result]:
    # Whole repeats of the trace text: every history ends at the same place in the text, so the
    # states (and the next 1,000 tokens) are comparable.
    period = len(_base_ids(tokenizer))
    lengths = [n - n % period for n in (1_000, 10_000, 100_000, 1_000_000) if n <= long]
    results, sizes = _flat_after_history(codec, lambda n: trace_ids(tokenizer, n), lengths, "step")
    constant = len(set(sizes.values())) == 1
    first, last = lengths[0], lengths[-1]
    results.append(
        Result(
            f"state size after {first:,} .. {last:,} tokens (bytes)",
            float(max(sizes.values())),
            None,
            "constant",
            constant,
        )
    )
    return results


def byte_run_section(tokenizer: Any, long: int = 1_000_000) -> list[Result]:
    """An endless run of byte-fallback tokens (valid UTF-8, so it is held): per-token cost stays
    flat; the held state grows unless ``max_byte_run`` caps it.
    """
    vocab = getattr(tokenizer, "backend_tokenizer", tokenizer).get_vocab(with_added_tokens=True)
    run = [vocab[f"<0x{b:02X}>"] for b in "中".encode()]
    lengths = [n for n in (1_000, 10_000, 100_000, 1_000_000) if n <= long]
    results = []
    for cap in (None, 64):
        codec = codec_for(tokenizer, max_byte_run=cap)
        label = "byte run, no cap" if cap is None else f"byte run, max_byte_run={cap}"
        lines, sizes = _flat_after_history(codec, lambda n: (run * (n // 3 + 1))[:n], lengths, label)
        results.extend(lines)
        held = f"{label}: held state {sizes[lengths[0]]:,} .. {sizes[lengths[-1]]:,} B"
        if cap is None:
            results.append(Result(held, 0.0, None, "grows (the documented exception)"))
        else:
            bounded = max(sizes.values()) <= 2 * sizes[lengths[0]]
            results.append(Result(held, 0.0, None, "bounded by the cap", bounded))
    return results
