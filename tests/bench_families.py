"""Benchmark for docs/families.md and docs/benchmarks.md (a script, not a test):

    .venv/bin/python tests/bench_families.py step [NAME...]       # per token, exact codec vs fallback
    .venv/bin/python tests/bench_families.py build [OTHER_SRC]    # codec_for per tokenizer [vs another src]

``step`` runs, side by side (interleaved rounds, best of each), ``step`` through the codec of each
tokenizer and through its generic fallback (``codec_for(..., window=True)``) over the ids of the
mixed-script trace text, and prints both and their ratio. ``build`` times ``codec_for`` for the
real tokenizers in worker processes taking turns, one build each per round, seven rounds per
tokenizer: this checkout's ``src``, the same without the build-time check, and ``OTHER_SRC``
(another checkout's, e.g. ``git archive c4932ea src | tar -x -C /tmp/old``: the build before the
check); it prints the best of each and the ratios of this checkout's to the others.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import families
import helpers
import puredetok
from puredetok.cli._timing import TEXT, compare


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
    # Mistral's files as MistralCommonBackend (its encode is transformers'), when mistral-common is there.
    try:
        import mistral_objects
    except ImportError:
        mistral = {}
    else:
        mistral = {
            f"mistral:{name}": (lambda name=name: mistral_objects.backend(name))
            for name in ("tekken_240911", "spm_v7")
        }
    return {**real, **families.FAMILIES, **mistral}


def step_costs(tokens: int = 3000, names: list[str] | None = None) -> None:
    """Exact codec and fallback per token, side by side, for every tokenizer (or those named)."""
    print(f"{'tokenizer':<22} {'family':<28} {'exact ns':>9} {'fallback ns':>12} {'ratio':>6}")
    for name, build in _sources().items():
        if names and name not in names:
            continue
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


_WORKER = """
import sys, time
from puredetok.serving._loading import load_tokenizer
import puredetok._build.build as build
if sys.argv[1] == "unchecked":
    build.check_model = lambda *args, **kwargs: None
for line in sys.stdin:
    tokenizer = load_tokenizer(line.strip())
    began = time.perf_counter()
    build.codec_for(tokenizer)
    print(time.perf_counter() - began, flush=True)
"""
"""A build worker: reads tokenizer folders on stdin, builds each one's codec once and prints the
seconds it took; ``unchecked``, with the build-time check replaced by one that passes (the build
before it). It imports only its own checkout's ``puredetok``.
"""


def _worker(src: Path, check: bool) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.Popen(
        [sys.executable, "-c", _WORKER, "checked" if check else "unchecked"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=src,
    )


def build_costs(other: Path | None, rounds: int = 7) -> None:
    """codec_for per real tokenizer, in worker processes taking turns (best of ``rounds`` each):
    this checkout's, this checkout's without the build-time check, and another checkout's.
    """
    mine = Path(__file__).resolve().parents[1] / "src"
    workers = {"this": _worker(mine, True), "unchecked": _worker(mine, False)}
    if other is not None:
        workers["other"] = _worker(other, True)
    head = f"{'tokenizer':<24} {'ids':>7} {'this s':>8} {'no check':>8} {'ratio':>6}"
    print(head + (f" {'other s':>8} {'ratio':>6}" if other is not None else ""))
    for name in helpers.TOKENIZERS:
        best = dict.fromkeys(workers, float("inf"))
        folder = helpers._folder(name)
        for _ in range(rounds + 1):  # the first round loads the tokenizer
            for label, worker in workers.items():
                assert worker.stdin is not None and worker.stdout is not None
                worker.stdin.write(f"{folder}\n")
                worker.stdin.flush()
                best[label] = min(best[label], float(worker.stdout.readline()))
        size = len(helpers.tokenizer(name))
        line = f"{name:<24} {size:>7} {best['this']:>8.3f} {best['unchecked']:>8.3f}"
        line += f" {best['this'] / best['unchecked']:>6.2f}"
        if other is not None:
            line += f" {best['other']:>8.3f} {best['this'] / best['other']:>6.2f}"
        print(line, flush=True)
    for worker in workers.values():
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait()


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "step"
    if what == "build":
        build_costs(Path(sys.argv[2]) if len(sys.argv) > 2 else None)
    elif what == "step":
        step_costs(names=sys.argv[2:])
    else:
        sys.exit("usage: bench_families.py step|build [OTHER_SRC]")
