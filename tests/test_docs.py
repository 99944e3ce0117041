"""The documentation is tested: every ```python block of every page in docs/ runs (offline, on
real tokenizers; a block may use what the earlier blocks of its page defined), and every test the
pages cite as a proof exists."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
PAGES = sorted(DOCS.glob("*.md"))
FENCE = re.compile(r"^```(?:python|py)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
CITED = re.compile(r"tests/(test_\w+\.py)::(test_\w+)")


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """Each python block of a page with the line it starts on."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, match.start(1)) + 1, match.group(1)) for match in FENCE.finditer(text)]


PAGES_WITH_CODE = [page.name for page in PAGES if python_blocks(page)]


def test_the_docs_have_pages_with_examples() -> None:
    ours = {"index.md", "guarantees.md", "conformance.md", "streamer.md", "embedding.md"}
    assert ours <= set(PAGES_WITH_CODE)


@pytest.mark.parametrize("page", PAGES_WITH_CODE)
def test_every_python_example_runs(page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The blocks of a page run in order in one module (dataclasses and pickle look classes up there).
    module = types.ModuleType(f"docs_{Path(page).stem}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for line, code in python_blocks(DOCS / page):
        exec(compile(code, f"docs/{page}, block at line {line}", "exec"), module.__dict__)


def test_every_cited_test_exists() -> None:
    cited = {match.groups() for page in PAGES for match in CITED.finditer(page.read_text(encoding="utf-8"))}
    assert len(cited) >= 10
    tests = Path(__file__).parent
    missing = sorted(
        f"{file}::{name}"
        for file, name in cited
        if not (tests / file).exists() or f"def {name}(" not in (tests / file).read_text(encoding="utf-8")
    )
    assert not missing
