"""The layers meet only at their public faces: nothing outside ``puredetok.core`` imports one of
the core's modules or a private name of the core (issue 13): the stop layer, the adapters, the
command line and the testing kit use what ``puredetok.core`` exports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import puredetok.core

SOURCE = Path(puredetok.core.__file__).resolve().parents[1]
"""``src/puredetok``."""
CORE = SOURCE / "core"


def _outside_core() -> list[Path]:
    return sorted(path for path in SOURCE.rglob("*.py") if CORE not in path.parents)


def crossings(tree: ast.AST) -> list[str]:
    """The imports in ``tree`` that reach into the core past its public face."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("puredetok.core.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if node.module.startswith("puredetok.core."):
                found.append(node.module)
            elif node.module == "puredetok.core":
                found += [f"puredetok.core.{a.name}" for a in node.names if a.name.startswith("_")]
            elif node.module == "puredetok":
                found += [f"puredetok.{a.name}" for a in node.names if a.name == "core"]
    return found


def test_the_scan_sees_modules_outside_the_core() -> None:
    names = {path.relative_to(SOURCE).as_posix() for path in _outside_core()}
    assert {"stops/stream.py", "adapters/detokenize_manager.py", "adapters/replay.py"} <= names
    assert not any(name.startswith("core/") for name in names)


@pytest.mark.parametrize(
    "source",
    [
        "from puredetok.core.stream import step",
        "from puredetok.core import _state",
        "import puredetok.core.codec",
        "def f():\n    from puredetok.core.decoders.cleanup import apply_rules",
        "if True:\n    import puredetok.core.saving as saving",
    ],
)
def test_the_scan_finds_a_crossing(source: str) -> None:
    assert crossings(ast.parse(source))


def test_the_scan_lets_the_public_face_through() -> None:
    assert not crossings(ast.parse("from puredetok.core import Codec, step\nimport puredetok.core"))


def test_no_module_outside_the_core_imports_past_its_public_face() -> None:
    bad = [
        f"{path.relative_to(SOURCE).as_posix()}: {crossing}"
        for path in _outside_core()
        for crossing in crossings(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not bad, f"imports past puredetok.core's public face: {bad}"
