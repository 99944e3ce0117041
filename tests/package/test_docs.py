"""The documentation is tested: every ```python block of every page in docs/ runs (offline, on
real tokenizers; a block may use what the earlier blocks of its page defined; a block written as
an interactive session, with ``>>>`` prompts, is run as a doctest and its shown output checked),
and every test the pages cite as a proof exists."""

from __future__ import annotations

import doctest
import re
import sys
import types
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
FENCE = re.compile(r"^```(?:python|py)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
CITED = re.compile(r"tests/((?:\w+/)?test_\w+\.py)::(test_\w+)")


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
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for line, code in python_blocks(DOCS / page):
        where = f"docs/{page}, block at line {line}"
        if code.lstrip().startswith(">>>"):
            test = doctest.DocTestParser().get_doctest(code, module.__dict__, where, where, line)
            runner.run(test, clear_globs=False)
            module.__dict__.update(test.globs)  # a DocTest works on a copy of the names
        else:
            exec(compile(code, where, "exec"), module.__dict__)
    assert runner.failures == 0, f"{runner.failures} doctest example(s) of docs/{page} failed (see above)"


def test_every_cited_test_exists() -> None:
    cited = {match.groups() for page in PAGES for match in CITED.finditer(page.read_text(encoding="utf-8"))}
    assert len(cited) >= 10
    tests = Path(__file__).parents[1]
    missing = sorted(
        f"{file}::{name}"
        for file, name in cited
        if not (tests / file).exists() or f"def {name}(" not in (tests / file).read_text(encoding="utf-8")
    )
    assert not missing


def test_the_documented_replay_command_runs() -> None:
    """docs/trace.md shows a replay of docs/sample-trace.jsonl: the command and its output are real."""
    import subprocess

    root = DOCS.parent
    page = (DOCS / "trace.md").read_text(encoding="utf-8")
    command = re.search(r"^\$ (puredetok replay .*)$", page, flags=re.M)
    assert command
    _, *args = command.group(1).split()
    done = subprocess.run(
        [sys.executable, "-m", "puredetok.cli", *args], cwd=root, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    shown = page[command.end() + 1 : page.index("\n```", command.end())]
    *body, summary = shown.splitlines()
    assert "\n".join(body) + "\n" in done.stdout  # every request's line and text, in order
    timing = summary.index(" [")
    assert done.stdout.splitlines()[-1].startswith(summary[:timing])
