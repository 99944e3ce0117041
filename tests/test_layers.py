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
    assert {"stops/stream.py", "serving/detokenize_manager.py", "replay/replay.py"} <= names
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


# The rooms of the package, lowest first: a module imports only from its own room or a lower one.
LAYERS: dict[str, int] = {
    "errors": 0,
    "core": 1,
    "stops": 2,
    "testing": 2,
    "streamer": 2,
    "files": 2,  # reading files by content, decompressed: imports nothing of the package
    "__init__": 3,
    "serving": 3,
    "replay": 4,
    "worker": 4,
    "client": 5,  # the two sides of the worker's wire
    "engines": 4,
    "audit": 5,  # reads traces through replay
    "cli": 7,
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Every module of the package and the package modules it imports anywhere in its text
    (at the top, inside functions, under ``TYPE_CHECKING``): the static graph a reader follows."""
    modules = {_module_name(path): path for path in SOURCE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
        graph[name] = {module for module in found if module in modules and module != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected parts of more than one module."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for target in graph[module]:
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == module:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for module in graph:
        if module not in order:
            visit(module)
    return found


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_circle_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_anywhere() -> None:
    assert circles(import_graph()) == []


def test_every_room_has_a_layer_and_imports_only_downwards() -> None:
    graph = import_graph()
    assert {_room(module) for module in graph} <= set(LAYERS)
    upward = [
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if LAYERS[_room(target)] > LAYERS[_room(module)]
        or (LAYERS[_room(target)] == LAYERS[_room(module)] and _room(target) != _room(module))
    ]
    assert not upward


@pytest.mark.parametrize(
    "room",
    [
        "serving",
        "worker",
        "replay",
        "stops",
        "cli",
        "testing",
        "client",
        "audit",
        "audit/formats",
        "core",
        "engines",
        "files",
    ],
)
def test_no_room_holds_more_than_about_3000_lines(room: str) -> None:
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in (SOURCE / room).glob("*.py"))
    assert lines <= 3000, f"{room}/ holds {lines} lines in its own files"
