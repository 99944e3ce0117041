"""How often vLLM's own derender and puredetok's give a text other than contract C's, on random
requests through vLLM's own render server (not a test: a measurement for docs/engines/vllm.md).
Run in vLLM's environment from the repository's root::

    ENV/bin/python engine_tests/vllm/derender_compare.py [EXAMPLES]

Requests: a prompt as engines send them, random ids or none; an output of random ids over the
whole vocabulary or of multi-script text; ``skip_special_tokens`` both ways; streamed through
``/v1/completions/derender`` in chunks of 1 - 4 ids (the client carrying the state), and whole.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "tests")]

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import conftest  # noqa: E402,F401  - offline, the helpers on the path
import helpers  # noqa: E402
import puredetok.engines.vllm as plugin  # noqa: E402
from derender import render_client, stream, whole  # noqa: E402
from test_plugin import expected  # noqa: E402

NAMES = ("qwen3", "llama2", "mistral_v03", "t5_small")


def count(name: str, examples: int) -> list[int]:
    """[requests, vLLM's own wrong streamed, whole, puredetok's wrong streamed, whole]."""
    totals = [0, 0, 0, 0, 0]
    client = render_client(name)

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        prompt=st.one_of(st.just([]), helpers.prompt_lists(name)),
        output=helpers.output_lists(name).filter(bool),
        skip=st.booleans(),
        chunks=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    )
    def one(prompt: list[int], output: list[int], skip: bool, chunks: list[int]) -> None:
        want = expected(name, prompt, output, skip)
        plugin.unregister()
        try:
            theirs = stream(client, prompt, output, chunks, skip_special_tokens=skip).text
            theirs_whole = whole(client, prompt, output, skip_special_tokens=skip)
        finally:
            plugin.register()
        ours = stream(client, prompt, output, chunks, skip_special_tokens=skip).text
        ours_whole = whole(client, prompt, output, skip_special_tokens=skip)
        totals[0] += 1
        for at, text in enumerate((theirs, theirs_whole, ours, ours_whole), 1):
            totals[at] += text != want

    one()
    return totals


if __name__ == "__main__":
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    for name in NAMES:
        n, theirs, theirs_whole, ours, ours_whole = count(name, examples)
        print(
            f"{name:<12} {n} requests: vLLM's own wrong {theirs} streamed, {theirs_whole} whole;"
            f" puredetok wrong {ours} streamed, {ours_whole} whole",
            flush=True,
        )
