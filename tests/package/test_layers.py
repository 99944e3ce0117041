"""The rooms of the package and how they meet: the stepping core (``puredetok._core``) and the
builder (``puredetok._build``) are used through their faces (each package's ``__all__``), no import
points up a layer nor runs in a circle, and every room has one role, said in one line, and stays
small.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

import puredetok
import puredetok_audit

SOURCE = Path(puredetok.__file__).resolve().parent
"""``src/puredetok``."""

FACED = ("_core", "_build")
"""The rooms that the others use only through their package's face."""
REACHES_IN = {"_build": {"_core"}}
"""Who may import a faced room's modules: the builder compiles the core's records and stages."""


def _room_of(path: Path) -> str:
    parts = path.relative_to(SOURCE).parts
    return parts[0].removesuffix(".py") if len(parts) > 1 or parts[0] != "__init__.py" else "__init__"


def crossings(tree: ast.AST, importer: str = "") -> list[str]:
    """The imports in ``tree`` (of a module in room ``importer``) that reach into ``_core`` or
    ``_build`` past its face: one of its modules, or a private name of its package."""
    found = []
    for room in FACED:
        if room == importer or room in REACHES_IN.get(importer, ()):
            continue
        package = f"puredetok.{room}"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [alias.name for alias in node.names if alias.name.startswith(f"{package}.")]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
                if node.module.startswith(f"{package}."):
                    found.append(node.module)
                elif node.module == package:
                    found += [f"{package}.{a.name}" for a in node.names if a.name.startswith("_")]
                elif node.module == "puredetok":
                    found += [f"puredetok.{a.name}" for a in node.names if a.name == room]
    return found


def test_the_scan_sees_every_room() -> None:
    rooms = {_room_of(path) for path in SOURCE.rglob("*.py")}
    assert {"_core", "_build", "stops", "serving", "errors", "__init__"} <= rooms


@pytest.mark.parametrize(
    "source",
    [
        "from puredetok._core.stream import step",
        "from puredetok._core import _state",
        "import puredetok._core.codec",
        "def f():\n    from puredetok._core.decoders.cleanup import apply_rules",
        "if True:\n    import puredetok._core.saving as saving",
        "from puredetok._build.build import codec_for",
        "from puredetok import _build",
    ],
)
def test_the_scan_finds_a_crossing(source: str) -> None:
    assert crossings(ast.parse(source), "stops")


def test_the_scan_lets_the_faces_through() -> None:
    source = "from puredetok._core import Codec, step\nimport puredetok._core\n"
    source += "from puredetok._build import codec_for"
    assert not crossings(ast.parse(source), "stops")
    assert not crossings(ast.parse("from puredetok._core.chain import Chain"), "_build")
    assert crossings(ast.parse("from puredetok._build.compile import compile_chain"), "_core")


def test_no_module_imports_past_a_faced_rooms_face() -> None:
    bad = [
        f"{path.relative_to(SOURCE).as_posix()}: {crossing}"
        for path in sorted(SOURCE.rglob("*.py"))
        for crossing in crossings(ast.parse(path.read_text(encoding="utf-8")), _room_of(path))
    ]
    assert not bad, f"imports past the face of puredetok._core or puredetok._build: {bad}"


def _top_level_imports(tree: ast.Module) -> list[str]:
    """The modules a module imports when it is imported: at its top, outside ``if TYPE_CHECKING``
    (an import inside a function runs only when it is called)."""
    found: list[str] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            found.append(node.module)
        elif isinstance(node, ast.If) and ast.unparse(node.test) != "TYPE_CHECKING":
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
    return found


def _foreign(room: str, anywhere: bool) -> list[str]:
    """The imports of the room's modules that are neither the standard library, attrs, nor the
    package itself: at import time, or (``anywhere``) in functions and under TYPE_CHECKING too."""
    allowed = set(sys.stdlib_module_names) | {"attrs", "attr", "puredetok"}
    found = []
    for path in sorted((SOURCE / room).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if anywhere:
            names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
            names += [
                n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level
            ]
        else:
            names = _top_level_imports(tree)
        found += [
            f"{path.relative_to(SOURCE).as_posix()}: {name}"
            for name in names
            if name.split(".")[0] not in allowed
        ]
    return found


def test_the_scan_of_imports_at_import_time() -> None:
    source = (
        "import os\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tokenizers\n"
        "def f():\n    import transformers\ntry:\n    import numpy\nexcept ImportError:\n    pass\n"
    )
    assert sorted(_top_level_imports(ast.parse(source))) == ["numpy", "os", "typing"]


def test_the_stepping_core_imports_only_attrs_and_the_standard_library() -> None:
    """Anywhere in its text: it steps with nothing else (tests/package/test_core_alone.py runs it so)."""
    assert _foreign("_core", anywhere=True) == []


def test_the_builder_imports_no_tokenizer_library_when_it_is_imported() -> None:
    """``tokenizers`` and ``transformers`` only under TYPE_CHECKING or inside the functions that
    read their objects: ``import puredetok`` needs neither."""
    assert _foreign("_build", anywhere=False) == []


# The rooms of the package, lowest first: a module imports only from its own room or a lower one.
LAYERS: dict[str, int] = {
    "errors": 0,
    "_options": 1,  # how every option's value is checked
    "_core": 1,  # what steps: imports only attrs and the standard library
    "_build": 2,  # what builds codecs from tokenizer objects
    "core": 2,  # the old module path that pickles of states made before the split name
    "stops": 3,
    "testing": 3,
    "streamer": 3,
    "__init__": 4,
    "serving": 4,
    "worker": 5,
    "client": 6,  # the two sides of the worker's wire
    "engines": 5,
    "cli": 8,
}


def _module_name(path: Path, source: Path = SOURCE) -> str:
    parts = list(path.relative_to(source.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(source: Path = SOURCE) -> dict[str, set[str]]:
    """Every module of the package (at ``source``) and the package modules it imports anywhere in
    its text (at the top, inside functions, under ``TYPE_CHECKING``): the static graph a reader
    follows."""
    modules = {_module_name(path, source): path for path in source.rglob("*.py")}
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


CHECKERS = Path(puredetok_audit.__file__).resolve().parent
"""``puredetok-audit/src/puredetok_audit``: the offline checkers, a distribution beside the package."""


def test_the_package_never_imports_the_checkers() -> None:
    """puredetok runs without puredetok-audit: nothing in it names the checkers' package (the command
    line finds their commands through entry points)."""
    named = [
        path.relative_to(SOURCE).as_posix()
        for path in SOURCE.rglob("*.py")
        if "puredetok_audit" in path.read_text(encoding="utf-8")
    ]
    assert named == []


def test_the_checkers_import_downwards() -> None:
    """In puredetok-audit: reading files imports nothing of it, replay only that, the audit not
    the commands, and no circle."""
    graph = import_graph(CHECKERS)
    assert circles(graph) == []
    within = {
        module: {t for t in targets if t.startswith("puredetok_audit")} for module, targets in graph.items()
    }
    for module, targets in within.items():
        if module.startswith("puredetok_audit._files"):
            assert all(t.startswith("puredetok_audit._files") for t in targets), module
        elif module.startswith("puredetok_audit.replay"):
            assert all(t.startswith(("puredetok_audit._files", "puredetok_audit.replay")) for t in targets), (
                module
            )
        elif not module.startswith("puredetok_audit._cli"):
            assert not any(t.startswith("puredetok_audit._cli") for t in targets), module


ROOMS = sorted(path.parent.name for path in SOURCE.glob("*/__init__.py"))
"""Every room that is a folder (a package of its own): its role is its ``__init__``'s docstring."""


def test_the_rooms_are_found() -> None:
    assert {"_core", "_build", "stops", "serving", "worker", "client", "cli"} <= set(ROOMS)


@pytest.mark.parametrize("room", ROOMS)
def test_no_room_holds_more_than_5000_lines(room: str) -> None:
    """Counting its subfolders (``audit/formats``, ``_core/decoders`` ...). A cap is a smoke alarm:
    a room past it is split by role, never to fit the number."""
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in (SOURCE / room).rglob("*.py"))
    assert lines <= 5000, f"{room}/ holds {lines} lines"


def test_the_package_holds_at_most_19000_lines() -> None:
    """What ``pip install puredetok`` brings of its own: every line of its Python, docstrings and
    blank lines counted (the offline checkers are puredetok-audit's). A smoke alarm, as the rooms'
    cap: past it, something the engines do not need has moved in."""
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in SOURCE.rglob("*.py"))
    assert lines <= 19000, f"src/puredetok holds {lines} lines"


def role(docstring: str | None) -> str | None:
    """The one-line role of a room: its docstring's first line when that line is a whole sentence
    and its first paragraph; None otherwise."""
    if not docstring:
        return None
    lines = docstring.strip().splitlines()
    first = lines[0].strip()
    if not first.endswith(".") or (len(lines) > 1 and lines[1].strip()):
        return None
    return first


def test_the_role_is_one_line() -> None:
    assert role("What steps: records and stages.\n\nMore.") == "What steps: records and stages."
    assert role("What steps: records and\nstages.") is None
    assert role("What steps") is None
    assert role(None) is None


@pytest.mark.parametrize("room", ROOMS)
def test_every_room_says_its_role_in_one_line(room: str) -> None:
    tree = ast.parse((SOURCE / room / "__init__.py").read_text(encoding="utf-8"))
    assert role(ast.get_docstring(tree)) is not None, f"{room}/__init__.py: no one-line role first"


def test_every_room_is_in_the_architecture_page() -> None:
    """docs/architecture.md's table of rooms: a row for every room that is a folder, and none for a
    folder that is not there."""
    page = (SOURCE.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    beside = page.index("### Beside the package")
    rows = set(
        re.findall(r"^\| `(\w+)` \|", page[page.index("## The rooms around the core") : beside], flags=re.M)
    )
    assert set(ROOMS) <= rows
    assert rows - set(ROOMS) <= {"errors"}  # a module of its own
    parts = set(re.findall(r"^\| `(\w+)` \|", page[beside : page.index("The tests mirror")], flags=re.M))
    assert parts == {path.parent.name for path in CHECKERS.glob("*/__init__.py")} - {"_formats"}
