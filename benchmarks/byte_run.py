"""An endless valid byte-fallback run: the documented exception to a bounded state (G5)."""

from __future__ import annotations

from typing import Any

from puredetok import codec_for
from puredetok.cli._measure import _flat_after_history
from puredetok.cli._timing import Result


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
