"""How often vLLM's own detokenizer and puredetok's give a text other than contract C's, on random
requests through vLLM's real ``OutputProcessor`` (not a test: a measurement for
docs/engines/vllm.md). Run in vLLM's environment from the repository's root::

    ENV/bin/python engine_tests/vllm/compare.py [EXAMPLES]

Requests: a prompt as engines send them, random ids or none; an output of random ids over the
whole vocabulary or of multi-script text; ``skip_special_tokens`` both ways; ended on length.
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
from driver import own_detokenizer, run, vllm_tokenizer  # noqa: E402
from test_plugin import expected  # noqa: E402

NAMES = ("qwen3", "llama2", "mistral_v03", "t5_small")


def count(name: str, examples: int) -> tuple[int, int, int]:
    """(requests, wrong with vLLM's own detokenizer, wrong with puredetok's)."""
    totals = [0, 0, 0]

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        prompt=st.one_of(st.just([]), helpers.prompt_lists(name)),
        output=helpers.output_lists(name).filter(bool),
        skip=st.booleans(),
    )
    def one(prompt: list[int], output: list[int], skip: bool) -> None:
        want = expected(name, prompt, output, skip)
        with own_detokenizer():
            theirs = run(vllm_tokenizer(name), prompt, output, skip_special_tokens=skip).text
        ours = run(vllm_tokenizer(name), prompt, output, skip_special_tokens=skip).text
        totals[0] += 1
        totals[1] += theirs != want
        totals[2] += ours != want

    one()
    return totals[0], totals[1], totals[2]


if __name__ == "__main__":
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    for name in NAMES:
        requests, vllm_wrong, ours_wrong = count(name, examples)
        print(f"{name:<12} {requests} requests: vLLM's own wrong {vllm_wrong}, puredetok wrong {ours_wrong}")
