"""The examples in the adapters' documentation run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["adapters.md", "worker.md", "trace.md"]


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / page).read_text(), flags=re.S)


@pytest.mark.parametrize("page", PAGES)
def test_python_examples_run(page: str) -> None:
    blocks = python_blocks(page)
    assert blocks
    if page == "adapters.md":  # the blocks build on each other: run them as one script
        blocks = ["\n".join(blocks)]
    for block in blocks:
        done = subprocess.run(
            [sys.executable, "-c", block],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ},
        )
        assert done.returncode == 0, done.stderr[-3000:]


def test_the_documented_replay_command_runs() -> None:
    page = (ROOT / "docs" / "trace.md").read_text()
    command = re.search(r"^\$ (puredetok replay .*)$", page, flags=re.M)
    assert command
    program, *args = command.group(1).split()
    done = subprocess.run(
        [sys.executable, "-m", "puredetok.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    table = page[page.index("uid  tokens") : page.index("6 requests")]
    assert table in done.stdout
