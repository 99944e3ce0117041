"""Both tokenizer processes on the same seeded random requests, over real sockets, with the
scheduler's frames: puredetok's text is the text mini-sglang's offline ``LLM.generate`` returns
(``tokenizer.decode`` of the output, a finishing EOS left out) for every request; mini-sglang's own
is counted where it is not, by kind, and the counts are the table in docs/engines/minisgl.md.

``PUREDETOK_MINISGL_TOKENIZERS=all`` compares all ten shared tokenizers (CI: four).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from minisgl_helpers import ALL, COMPARED, Worker, offline_text, random_requests, stream

Workers = Callable[[str, str], Worker]

REQUESTS = 60
"""Requests per tokenizer."""
SEED = 0

NAMES = ALL if os.environ.get("PUREDETOK_MINISGL_TOKENIZERS") == "all" else COMPARED

DOC = Path(__file__).resolve().parents[2] / "docs" / "engines" / "minisgl.md"


def kind_of(text: str, expected: str) -> str:
    """What is wrong with a text that is not ``expected``."""
    if expected.startswith(text):
        return "tail lost"
    if len(text) > len(expected):
        return "text added"
    return "text changed"


def documented() -> dict[str, tuple[int, Counter[str]]]:
    """The docs' table: per tokenizer, mini-sglang's wrong requests of :data:`REQUESTS`, by kind."""
    rows: dict[str, tuple[int, Counter[str]]] = {}
    for name, wrong, kinds in re.findall(
        r"^\| `(\w+)` \| (\d+) of \d+ \| ([^|]*) \|", DOC.read_text(), flags=re.M
    ):
        counts: Counter[str] = Counter()
        for count, kind in re.findall(r"(\d+) ([a-z ]+?)(?:,|$)", kinds.strip()):
            counts[kind.strip()] = int(count)
        rows[name] = (int(wrong), counts)
    return rows


@pytest.mark.parametrize("name", NAMES)
def test_puredetok_is_exact_where_mini_sglangs_own_is_not(workers: Workers, name: str) -> None:
    requests = random_requests(name, REQUESTS, SEED)
    got = {kind: stream(workers(kind, name), requests) for kind in ("minisgl", "puredetok")}
    wrong: Counter[str] = Counter()
    for request in requests:
        expected = offline_text(name, request.ids)
        assert got["puredetok"][request.uid] == (expected, True), request.ids
        text, finished = got["minisgl"][request.uid]
        assert finished
        if text != expected:
            wrong[kind_of(text, expected)] += 1
    row = f"| `{name}` | {sum(wrong.values())} of {REQUESTS} | " + ", ".join(
        f"{n} {k}" for k, n in sorted(wrong.items())
    )
    print(row)
    assert documented()[name] == (sum(wrong.values()), wrong), row
