"""``python tools/fast_path_ab.py OLD NEW [--rounds N]``: the per-token path of two trees side by side.

``OLD`` and ``NEW`` are ``src/puredetok`` folders (main's and a branch's, say). Their
``_core/stream.py`` and ``stops/_stream.py`` are loaded side by side in this one process (the rest of
the package is the one imported, with the tests' tokenizers), ``OLD``'s twice: the second copy is
the control, what two identical copies differ by on this machine now. ``step``, ``advance``
(without and with a token count), ``feed`` and ``advance_many`` by 4 ids run over the same
Qwen3 and Llama-2 ids, the copies in a new random order each round; per round, each takes the
best of 5 repeats, and the ratios to ``OLD`` in the same round are printed (min, median, max).
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import sys
import timeit
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import codec, tokenizer  # noqa: E402
from puredetok.stops import StopRules  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog. Streaming detokenization, 中文 and émojis 🎉 too. " * 20


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cases(core: ModuleType, stops: ModuleType, name: str) -> dict[str, tuple[str, dict[str, Any]]]:
    c = codec(name, True)
    ids = tokenizer(name).encode(TEXT, add_special_tokens=False)
    chunks = [ids[i : i + 4] for i in range(0, len(ids), 4)]
    counted = StopRules(stop=["</answer>"], max_new_tokens=10**6)
    each = "s = first\nfor t in ids: s, d = call(s, t)"
    return {
        "step": (each, {"first": core.start(c), "ids": ids, "call": core.step}),
        "advance": (each, {"first": stops.open_stream(c), "ids": ids, "call": stops.advance}),
        "advance, counted": (
            each,
            {"first": stops.open_stream(c, counted), "ids": ids, "call": stops.advance},
        ),
        "feed by 4": (each, {"first": core.start(c), "ids": chunks, "call": core.feed}),
        "advance_many by 4": (
            each,
            {"first": stops.open_stream(c), "ids": chunks, "call": stops.advance_many},
        ),
    }


def main() -> None:
    """Time both trees and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    copies = {"old": args.old, "control": args.old, "new": args.new}
    trees = {
        label: (
            _load(f"{label}_core", root / "_core" / "stream.py"),
            _load(f"{label}_stops", root / "stops" / "stream.py"),
        )
        for label, root in copies.items()
    }
    cases = {
        (name, what, label): case
        for label, (core, stops) in trees.items()
        for name in ("qwen3", "llama2")
        for what, case in _cases(core, stops, name).items()
    }
    sizes = {
        name: len(tokenizer(name).encode(TEXT, add_special_tokens=False)) for name in ("qwen3", "llama2")
    }
    times: dict[tuple[str, str, str], list[float]] = {key: [] for key in cases}
    for _ in range(args.rounds):
        for key in random.sample(list(cases), len(cases)):
            statement, scope = cases[key]
            best = min(timeit.Timer(statement, globals=scope).repeat(repeat=5, number=20))
            times[key].append(best / 20 / sizes[key[0]] * 1e9)
    for name in ("qwen3", "llama2"):
        for what in ("step", "advance", "advance, counted", "feed by 4", "advance_many by 4"):
            old = times[(name, what, "old")]
            line = f"{name:7} {what:18} old {statistics.median(old):6.1f} ns/token"
            for label in ("new", "control"):
                ratios = sorted(a / b for a, b in zip(times[(name, what, label)], old))
                line += f"  {label}/old {ratios[0]:.3f} {statistics.median(ratios):.3f} {ratios[-1]:.3f}"
            print(line)


if __name__ == "__main__":
    main()
