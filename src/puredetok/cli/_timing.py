"""Side-by-side timing: interleaved rounds, best of each, so that machine noise hits all alike; and
repeats of the whole, whose ratios are shown as a range (min - max).
"""

from __future__ import annotations

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
    """One measured line: nanoseconds per token, and the target it is held to (if any).

    Measured over several repeats, ``ratio`` is the median one and ``low`` - ``high`` their range;
    ``met`` says in how many of ``repeats`` the target held (``ok``: in all of them).
    """

    name: str
    ns_per_token: float
    ratio: float | None = None
    target: str = ""
    ok: bool | None = None
    low: float | None = None
    high: float | None = None
    met: int | None = None
    repeats: int | None = None


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


def repeated(
    runs: Sequence[tuple[str, Callable[[], object]]], tokens: int, rounds: int, repeats: int
) -> list[dict[str, float]]:
    """:func:`compare`, ``repeats`` times: one dict of best ns per token per repeat."""
    return [compare(runs, tokens, rounds) for _ in range(max(1, repeats))]


def ratio_result(
    name: str,
    samples: Sequence[dict[str, float]],
    reference: str,
    target: str = "",
    limit: float | None = None,
    *,
    label: str | None = None,
) -> Result:
    """The line of run ``name``: its best ns per token over the repeats, and its ratio to run
    ``reference`` in each repeat (the median, and the range); held to ``ratio <= limit`` if given.
    """
    ratios = sorted(sample[name] / sample[reference] for sample in samples)
    met = None if limit is None else sum(ratio <= limit for ratio in ratios)
    return Result(
        name if label is None else label,
        min(sample[name] for sample in samples),
        ratios[len(ratios) // 2],
        target,
        None if met is None else met == len(ratios),
        ratios[0],
        ratios[-1],
        met,
        len(ratios),
    )


def _verdict(result: Result) -> str:
    if result.ok is None:
        return ""
    if result.met is None or result.repeats is None or result.met in (0, result.repeats):
        return "  ok" if result.ok else "  MISSED"
    return f"  ok in {result.met} of {result.repeats} repeats"


def format_table(title: str, results: Sequence[Result]) -> str:
    """A plain-text table of results; a ratio measured over repeats shows its range."""
    lines = [title, f"  {'measure':<50} {'ns/token':>10} {'ratio (range)':>14}  target"]
    for r in results:
        if r.ratio is None:
            ratio = ""
        elif r.low is not None and r.high is not None and r.repeats and r.repeats > 1:
            ratio = f"{r.low:.2f}-{r.high:.2f}"
        else:
            ratio = f"{r.ratio:.3f}"
        lines.append(f"  {r.name:<50} {r.ns_per_token:>10.1f} {ratio:>14}  {r.target}{_verdict(r)}")
    return "\n".join(lines)
