"""Issue 27: user code of the serving side type-checks under ``mypy --strict`` as it is written
(tests/typing_serving.py: the manager, both clients, aborts with a list), and the mistakes the
types exist to catch are refused: ``abort("xy")`` (which iterated the string), ``abort(b"xy")``,
a list given where one uid goes, and a loaded tokenizer used as something else (it is no longer
``Any``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import mypy.api

import typing_serving

TESTS = Path(__file__).parent

MISUSE = """
from puredetok.client import FrontendClient
from puredetok.serving.detokenize_manager import DetokenizeManager
from puredetok.serving.loading import load_tokenizer

def misuse(manager: DetokenizeManager, client: FrontendClient) -> None:
    manager.abort("xy")
    manager.abort(b"xy")
    client.abort(["x"])
    count: int = load_tokenizer()
"""


def test_the_serving_sample_runs() -> None:
    assert typing_serving.detokenize_and_abort() == ["Hello, world", "*", ""]  # id 9 is "*"


def test_mypy_strict_accepts_the_serving_sample_and_refuses_the_mistakes(tmp_path: Path) -> None:
    misuse = tmp_path / "misuse_serving.py"
    misuse.write_text(textwrap.dedent(MISUSE))
    out, _, status = mypy.api.run(
        [
            "--strict",
            "--config-file",
            str(TESTS.parent / "mypy.ini"),
            str(TESTS / "typing_serving.py"),
            str(misuse),
        ]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1
    assert all(line.split(":")[0].endswith("misuse_serving.py") for line in errors), errors
    assert sorted({int(line.split(":")[1]) for line in errors}) == [7, 8, 9, 10], errors
    assert 'incompatible type "str"' in errors[0] and 'incompatible type "bytes"' in errors[1], errors
