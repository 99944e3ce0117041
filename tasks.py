#!/usr/bin/env python3
"""Project tasks with nothing but Python 3.11 and pip: ``python3 tasks.py demo|test|bench|docs``.

Each task first makes sure ``.venv`` exists with the project installed (with its dev extras); it
reinstalls when pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"
STAMP = VENV / ".puredetok-installed"
DEMO_TEXT = "鱻䨻🦩 is rare, 推理 naïve"


def run(*command: str | Path, env: dict[str, str] | None = None) -> None:
    """Run a command, stopping the task with its exit code if it fails."""
    print("+", " ".join(str(part) for part in command), flush=True)
    completed = subprocess.run([str(part) for part in command], cwd=ROOT, env=env)
    if completed.returncode:
        sys.exit(completed.returncode)


def ensure_venv() -> None:
    """Create .venv and install the project with dev extras (again when pyproject.toml changed)."""
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not PYTHON.exists():
        venv.create(VENV, with_pip=True)
    run(PYTHON, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", ".[dev]")
    STAMP.write_text(wanted)


def demo() -> None:
    """The main job: stream the SPEC's seed example through the embedded tokenizer."""
    run(BIN / "puredetok", "explain", DEMO_TEXT)


def test() -> None:
    """The whole test suite: types, lint, format, the docs build, tests (HYPOTHESIS_PROFILE=ci for CI)."""
    run(BIN / "mypy")
    run(BIN / "ruff", "check", "src", "tests", "tasks.py")
    run(BIN / "ruff", "format", "--check", "src", "tests", "tasks.py")
    with tempfile.TemporaryDirectory() as site:
        run(BIN / "mkdocs", "build", "--strict", "--quiet", "--site-dir", site)
    env = {**os.environ, "HYPOTHESIS_PROFILE": os.environ.get("HYPOTHESIS_PROFILE", "dev")}
    run(PYTHON, "-m", "pytest", "-n", os.environ.get("PYTEST_WORKERS", "auto"), env=env)


def bench() -> None:
    """The benchmark (ratios measured side by side)."""
    run(BIN / "puredetok", "bench")


def docs() -> None:
    """Build the documentation into site/ (warnings are errors)."""
    run(BIN / "mkdocs", "build", "--strict")


TASKS = {"demo": demo, "test": test, "bench": bench, "docs": docs}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in TASKS:
        print(f"usage: python3 tasks.py {{{'|'.join(TASKS)}}}", file=sys.stderr)
        sys.exit(2)
    ensure_venv()
    TASKS[sys.argv[1]]()
