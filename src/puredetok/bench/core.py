"""The core's benchmark: ``step`` and ``feed`` against ``DecodeStream`` and the two-window algorithm."""

from __future__ import annotations

__all__ = ["core_section", "trace_ids", "byte_run_section", "stepper", "feeder"]

import pickle
from collections.abc import Callable
from typing import Any

from tokenizers.decoders import DecodeStream

from puredetok.baselines import TwoWindow
from puredetok.bench.timing import TEXT, Result, compare
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


FEED_CHUNKS = (4, 16, 64, 256)
"""Chunk sizes ``feed`` is measured with; the 0.1x target applies from 64 tokens per call."""


def core_section(tokenizer: Any, tokens: int = 20_000, long: int = 1_000_000) -> list[Result]:
    """Per-token costs side by side, flatness from 1,000 to ``long`` tokens, and state size."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    codec = codec_for(tokenizer)
    ids = trace_ids(tokenizer, tokens)
    runs = [("step", stepper(codec, ids))]
    runs += [(f"feed, {chunk} ids per call", feeder(codec, ids, chunk)) for chunk in FEED_CHUNKS]
    runs += [
        (f"feed, {chunk} ids per call (NumPy int32)", feeder(codec, ids, chunk, True)) for chunk in (64, 256)
    ]
    runs += [
        ("DecodeStream.step (tokenizers)", _decode_stream(backend, ids)),
        ("two-window algorithm (engines)", _two_window(backend, ids)),
    ]
    best = compare(runs, tokens)
    reference = best["DecodeStream.step (tokenizers)"]
    results = []
    for name, _ in runs:
        ratio = best[name] / reference
        if name == "step":
            results.append(Result(name, best[name], ratio, "<= 0.5 x DecodeStream", ratio <= 0.5))
        elif name.startswith("feed") and int(name.split()[1]) >= 64:
            results.append(Result(name, best[name], ratio, "<= 0.1 x DecodeStream", ratio <= 0.1))
        else:
            results.append(Result(name, best[name], ratio))
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
