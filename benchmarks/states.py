"""What a state costs as a value: ``python -m benchmarks.states NAME=PATH ...``.

For each tokenizer, the bytes of :meth:`DecodeState.to_bytes` after every token of the texts of
:mod:`benchmarks.holds` (CJK prose, rare ideographs, emoji, mixed Markdown and code), after a
chat prompt (a state that also keeps the prompt's text, contract C), and of a stop-layer stream
with typical rules; their pickles; the generic fallback's state; and, for scale, the pickle of the
codec itself (which every pickled state carried before states travelled without their codec).
Every figure is a count of bytes: the same on every machine.
"""

from __future__ import annotations

__all__ = ["STOPS", "size_row", "size_table", "main"]

import argparse
import pickle
import statistics
from collections.abc import Sequence
from typing import Any

from benchmarks.holds import TEXTS
from puredetok import Codec, DecodeState, codec_for, start, step
from puredetok.stops import StopRules, Stream, advance, open_stream

STOPS = StopRules(stop=("</answer>", "\n\n"), eos_token_ids=(2, 151645), max_new_tokens=4096, min_tokens=4)
"""The stop rules of the streams measured: two stop strings, EOS ids, both token limits."""

_PROMPT = "You are a helpful assistant.\n\nUser: 推理引擎 😀 stream text:\n"


def _ids(tokenizer: Any, text: str) -> list[int]:
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    return list(backend.encode(text, add_special_tokens=False).ids)


def _states(codec: Codec, ids: Sequence[int], prompt: Sequence[int] = ()) -> list[DecodeState]:
    state, states = start(codec, prompt), []
    for token_id in ids:
        state, _ = step(state, token_id)
        states.append(state)
    return states


def _streams(codec: Codec, ids: Sequence[int]) -> list[Stream]:
    stream, streams = open_stream(codec, STOPS), []
    for token_id in ids:
        if stream.finished:
            break
        stream, _ = advance(stream, token_id)
        streams.append(stream)
    return streams


def _median_max(sizes: Sequence[int]) -> str:
    return f"{statistics.median(sizes):.0f} / {max(sizes)}"


def size_row(label: str, tokenizer: Any) -> str:
    """One row of :func:`size_table` for one tokenizer."""
    codec = codec_for(tokenizer)
    ids = [token_id for text in TEXTS.values() for token_id in _ids(tokenizer, text)]
    states = _states(codec, ids)
    prompted = _states(codec, _ids(tokenizer, "Sure: 🦩 推理."), _ids(tokenizer, _PROMPT))
    streams = _streams(codec, ids)
    window = _states(codec_for(tokenizer, window=True), ids[:400])
    cells = [
        label,
        f"{len(pickle.dumps(codec)) / 1e6:.2f} MB",
        _median_max([len(state.to_bytes()) for state in states]),
        _median_max([len(state.to_bytes()) for state in prompted]),
        _median_max([len(stream.to_bytes()) for stream in streams]),
        _median_max([len(pickle.dumps(state)) for state in states]),
        _median_max([len(state.to_bytes()) for state in window]),
    ]
    return "| " + " | ".join(cells) + " |"


def size_table(tokenizers: dict[str, Any]) -> str:
    """The markdown table of state sizes, one row per tokenizer (label: tokenizer)."""
    head = (
        "| tokenizer | pickled codec | state | state after a prompt | stream with stop rules "
        "| pickled state | fallback state |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    return "\n".join([head, *(size_row(label, tokenizer) for label, tokenizer in tokenizers.items())])


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table for ``NAME=PATH`` tokenizers (default: the embedded Qwen3)."""
    from puredetok.serving._loading import load_tokenizer

    parser = argparse.ArgumentParser(prog="python -m benchmarks.states", description=__doc__)
    parser.add_argument("tokenizers", nargs="*", metavar="NAME=PATH", help="tokenizers to measure")
    args = parser.parse_args(argv)
    named = dict(item.split("=", 1) for item in args.tokenizers) or {"Qwen3": ""}
    print("Bytes; cells with two figures are median / max over every token of the texts.")
    print(size_table({label: load_tokenizer(path or None) for label, path in named.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
