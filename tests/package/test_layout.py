"""The tests mirror the rooms (docs/architecture.md, "The rooms around the core"): every test module
sits in the folder of ``tests/`` named for the room it tests; at the top of ``tests/`` are only the
helpers several rooms share, each named here; every folder is on pytest's and mypy's path, so that
a module of one room imports another's, and no two modules share a name."""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from configparser import ConfigParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

ROOMS = (
    "core",
    "builder",
    "stops",
    "serving",
    "worker",
    "client",
    "replay",
    "audit",
    "engines",
    "cli",
    "testing",
    "bench",
    "package",
)
"""The folders of ``tests/``: one per room of the package (``builder`` for ``_build``: pytest skips
folders named ``build``), ``bench`` for ``benchmarks/`` and ``package`` for the whole package."""

SHARED = {
    "conftest",
    "helpers",
    "synthetic",
    "families",
    "holding",
    "decoder_contract",
    "stop_reference",
    "sources",
    "zmq_harness",
    "mistral_objects",
    "bench_families",
}
"""The modules at the top of ``tests/``: shared by the tests of more than one room."""


def _modules(folder: Path) -> set[str]:
    return {path.stem for path in folder.glob("*.py")}


def _folders() -> set[str]:
    return {
        path.name for path in TESTS.iterdir() if path.is_dir() and path.name not in ("data", "__pycache__")
    }


def test_the_top_of_tests_holds_only_the_shared_helpers() -> None:
    assert _modules(TESTS) == SHARED


def test_every_folder_is_a_room_and_holds_its_tests() -> None:
    assert _folders() == set(ROOMS)
    empty = [room for room in ROOMS if not any(name.startswith("test_") for name in _modules(TESTS / room))]
    assert not empty


def test_no_test_module_sits_deeper_than_its_room() -> None:
    deeper = [path for path in TESTS.glob("*/*/**/*.py") if "data" not in path.relative_to(TESTS).parts]
    assert not deeper


def test_module_names_are_unique_across_the_rooms() -> None:
    names = Counter(path.stem for path in TESTS.glob("*/*.py") if path.parent.name != "data")
    names.update(_modules(TESTS))
    assert [name for name, count in names.items() if count > 1] == []


def test_every_room_is_on_the_paths_of_pytest_ruff_and_mypy() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    folders = {f"tests/{room}" for room in ROOMS}
    assert folders <= set(project["tool"]["pytest"]["ini_options"]["pythonpath"])
    assert folders <= set(project["tool"]["ruff"]["src"])
    mypy = ConfigParser()
    mypy.read(ROOT / "mypy.ini", encoding="utf-8")
    assert folders <= set(mypy["mypy"]["mypy_path"].split(":"))


def test_the_architecture_page_says_where_each_rooms_tests_are() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert set(re.findall(r"`tests/(\w+)/`", page)) == set(ROOMS)


def test_the_tests_named_in_the_docs_and_tasks_are_in_their_rooms() -> None:
    """A path written ``tests/test_x.py`` (the flat layout) names no file: none is left, and every
    ``tests/ROOM/NAME.py`` named exists."""
    texts = [
        (ROOT / "tasks.py").read_text(encoding="utf-8"),
        (ROOT / "README.md").read_text(encoding="utf-8"),
    ]
    texts += [page.read_text(encoding="utf-8") for page in (ROOT / "docs").rglob("*.md")]
    flat = [match for text in texts for match in re.findall(r"(?<![\w/])tests/test_\w+\.py", text)]
    assert not flat
    named = {
        match
        for text in texts
        for match in re.findall(rf"(?<![\w/])tests/((?:{'|'.join(ROOMS)})/\w+\.py)", text)
    }
    assert len(named) >= 10
    assert sorted(name for name in named if not (TESTS / name).exists()) == []
