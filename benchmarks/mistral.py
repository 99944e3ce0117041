"""Mistral's Tekken beside Qwen3 (both byte-level): ``step`` on the same mixed-script text, side by
side in one run, so that the machine's load cancels out of the ratio.

Needs mistral-common (``pip install 'puredetok[mistral]'``); its Tekken file is read from the
installed package. ``python -m benchmarks.mistral`` prints the section alone.
"""

from __future__ import annotations

__all__ = ["TEKKEN_FILE", "installed_tekken", "tekken_section", "main"]

import argparse
from pathlib import Path
from typing import Any

from puredetok import codec_for, start, step
from puredetok.cli._measure import stepper, trace_ids
from puredetok.cli._timing import TEXT, Result, format_table, ratio_result, repeated

TEKKEN_FILE = "tekken_240911.json"
"""The Tekken file of mistral-common's package data that is measured."""

_QWEN3 = "Qwen3 step"


def installed_tekken(name: str = TEKKEN_FILE) -> Any | None:
    """mistral-common's ``Tekkenizer`` of one of its own files; None without mistral-common."""
    try:
        import mistral_common
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    except ImportError:
        return None
    path = Path(mistral_common.__file__).parent / "data" / name
    return Tekkenizer.from_file(path) if path.is_file() else None


LATIN = (
    "The quick brown fox jumps over the lazy dog, and the detokenizer streams every word of it. "
    "def f(x):\n    return {'k': [1, 2, 3]}  # code, naïve café, 1+1=2.\n"
)
"""A Latin-script trace (English prose and code): almost no character is split over tokens."""


def _ids(tekken: Any, text: str, tokens: int) -> list[int]:
    base = [int(i) for i in tekken.encode(text, bos=False, eos=False)]
    return (base * (tokens // len(base) + 1))[:tokens]


def _qwen_ids(qwen3: Any, text: str, tokens: int) -> list[int]:
    if text == TEXT:
        return trace_ids(qwen3, tokens)
    base = list(qwen3.encode(text, add_special_tokens=False))
    return (base * (tokens // len(base) + 1))[:tokens]


def off_fast_path(codec: Any, ids: list[int]) -> float:
    """The share of ``step`` calls over ``ids`` that leave the fast path (their hold is not the
    steady one, or the id has no steady text): a split character's bytes, and the id after them.
    """
    decoding, state, count = codec.decoding, start(codec), 0
    for token_id in ids:
        count += not (state.hold is decoding.idle and decoding.fast[token_id] is not None)
        state, _ = step(state, token_id)
    return count / len(ids)


def tekken_section(qwen3: Any, tekken: Any, tokens: int = 20_000, repeats: int = 3) -> list[Result]:
    """Per-token ``step`` of Tekken (KEEP and IGNORE) against Qwen3's, interleaved, ``repeats`` times,
    on two traces: the mixed-script text of the other sections and a Latin-script one; each stream
    is ``tokens`` ids of the text as that tokenizer encodes it. Also: the share of steps that leave
    the fast path (what sets the two apart on the mixed-script text).
    """
    qwen_codec, keep, ignore = (
        codec_for(qwen3),
        codec_for(tekken),
        codec_for(tekken, skip_special_tokens=True),
    )
    results = []
    for label, text in (("mixed-script", TEXT), ("Latin-script", LATIN)):
        tekken_ids, qwen_ids = _ids(tekken, text, tokens), _qwen_ids(qwen3, text, tokens)
        reference = f"{_QWEN3}, {label}"
        runs = [
            (reference, stepper(qwen_codec, qwen_ids)),
            (f"Tekken step, {label}", stepper(keep, tekken_ids)),
            (f"Tekken step, skip_special_tokens, {label}", stepper(ignore, tekken_ids)),
        ]
        samples = repeated(runs, tokens, 9, repeats)
        results += [
            ratio_result(name, samples, reference, "<= 1.2 x Qwen3", 1.2, label=f"{name} / Qwen3")
            for name, _ in runs[1:]
        ]
        for name, codec, ids in (("Qwen3", qwen_codec, qwen_ids), ("Tekken", keep, tekken_ids)):
            share = off_fast_path(codec, ids)
            results.append(Result(f"{name}, {label}: share of steps off the fast path", 0.0, share))
    return results


def main(argv: list[str] | None = None) -> int:
    """Print the section (``--tokens``, ``--repeats``)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mistral", description=__doc__)
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    tekken = installed_tekken()
    if tekken is None:
        parser.error("mistral-common is not installed (pip install 'puredetok[mistral]')")
    from puredetok.serving._loading import load_tokenizer

    title = f"Tekken ({TEKKEN_FILE}) beside Qwen3: step, same trace text, ratios over {args.repeats} repeats"
    print(format_table(title, tekken_section(load_tokenizer(), tekken, args.tokens, args.repeats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
