"""Side-by-side timing: interleaved repeats, best of each, so that machine noise hits all alike."""

from __future__ import annotations

__all__ = ["Result", "compare", "per_token_ns", "format_table", "TEXT"]

import time
from collections.abc import Callable, Sequence

import attrs

TEXT = (
    "推理引擎 😀 streams text: naïve café, 1+1=2.\n第二行结束。"
    " 日本語のテキストを、ひらがなとカタカナで書きます。"
    " 한국어 텍스트도 스트리밍됩니다. ภาษาไทยก็ได้ครับ. Ελληνικά, русский текст, עברית, العربية. 🦩🏳️‍🌈👍🏽🎉 "
    "def f(x):\n    return {'k': [1, 2, 3]}  # code ┌──┐ │ok│ └──┘ 鱻䨻 is rare. "
)
"""The mixed-script trace text: CJK, kana, Hangul, Thai, RTL scripts, emoji with modifiers, code."""


@attrs.frozen
class Result:
    """One measured line: nanoseconds per token, and the target it is held to (if any)."""

    name: str
    ns_per_token: float
    ratio: float | None = None
    target: str = ""
    ok: bool | None = None


def per_token_ns(run: Callable[[], object], tokens: int, repeats: int = 5) -> float:
    """Best-of-``repeats`` time of ``run()`` divided by the tokens it handles."""
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter_ns()
        run()
        best = min(best, time.perf_counter_ns() - began)
    return best / tokens


def compare(
    runs: Sequence[tuple[str, Callable[[], object]]], tokens: int, rounds: int = 5
) -> dict[str, float]:
    """Interleave the runs ``rounds`` times; best ns per token of each."""
    best = {name: float("inf") for name, _ in runs}
    for _ in range(rounds):
        for name, run in runs:
            began = time.perf_counter_ns()
            run()
            best[name] = min(best[name], (time.perf_counter_ns() - began) / tokens)
    return best


def format_table(title: str, results: Sequence[Result]) -> str:
    """A plain-text table of results."""
    lines = [title, f"  {'measure':<46} {'ns/token':>10} {'ratio':>8}  target"]
    for r in results:
        ratio = "" if r.ratio is None else f"{r.ratio:.3f}"
        verdict = "" if r.ok is None else ("  ok" if r.ok else "  MISSED")
        lines.append(f"  {r.name:<46} {r.ns_per_token:>10.1f} {ratio:>8}  {r.target}{verdict}")
    return "\n".join(lines)
