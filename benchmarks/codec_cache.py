"""What asking the codec cache costs, in instructions, counted by callgrind.

Callgrind counts each section between two of its dumps (deterministic, so the shared machine's
load does not matter)::

    valgrind --tool=callgrind --instr-atstart=no python -m benchmarks.codec_cache TOKENIZER_FOLDER

Sections, in the dumps' order: ``open`` (one ``handle_batch`` of 256 openings, each with stop
strings of its own, so that each asks for its codec), ``steps`` (16 ``handle_batch`` calls of a
one-id message for each of the 256 requests), ``codec_of`` (10,000 ``manager.codec_of`` of kept
options), ``vllm`` (10,000 of the vLLM plugin's ``codec_of``), ``empty`` (the loop and the dump
alone, to subtract). Without callgrind it runs the same work and counts nothing.
"""

from __future__ import annotations

__all__ = ["main"]

import os
import subprocess
import sys

import puredetok.engines.vllm as plugin
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._loading import load_tokenizer
from puredetok.serving._messages import DetokenizeBatch, DetokenizeMsg, Opening, SamplingParams

REQUESTS, STEPS, CALLS = 256, 16, 10_000


def _callgrind(*arguments: str) -> None:
    """Ask callgrind to act on this process (nothing happens outside callgrind)."""
    subprocess.run(
        ["callgrind_control", *arguments, str(os.getpid())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the sections on the tokenizer in the folder named by the first argument."""
    folder = (sys.argv[1:] if argv is None else argv)[0]
    tok = load_tokenizer(folder)
    manager = DetokenizeManager(tok)
    plugin.codec_of(tok, True, True)
    pieces = tok.encode("Hello world, 你好 😀 again", add_special_tokens=False)
    openings = [
        DetokenizeMsg(
            n,
            (pieces[n % len(pieces)],),
            False,
            Opening((), SamplingParams(stop=[f"stop{n}"], max_new_tokens=1000)),
        )
        for n in range(REQUESTS)
    ]
    rounds = [
        DetokenizeBatch.of(
            [DetokenizeMsg(n, (pieces[(n + step) % len(pieces)],), False, None) for n in range(REQUESTS)]
        )
        for step in range(STEPS)
    ]
    first = DetokenizeBatch.of(openings)
    params = SamplingParams(skip_special_tokens=False)
    manager.codec_of(params)
    _callgrind("-i", "on")
    _callgrind("-z")
    manager.handle_batch(first)
    _callgrind("-d", "open")
    for batch in rounds:
        manager.handle_batch(batch)
    _callgrind("-d", "steps")
    for _ in range(CALLS):
        manager.codec_of(params)
    _callgrind("-d", "codec_of")
    for _ in range(CALLS):
        plugin.codec_of(tok, True, True)
    _callgrind("-d", "vllm")
    for _ in range(CALLS):
        pass
    _callgrind("-d", "empty")
    return 0


if __name__ == "__main__":
    sys.exit(main())
