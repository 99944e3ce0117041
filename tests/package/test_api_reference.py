"""docs/api.md: the API reference is generated from the docstrings of every public name."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import griffe
import msgspec
import pytest

import puredetok
import puredetok_audit

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "api.md"
DOCUMENTED = re.findall(r"^::: ([\w.]+)$", PAGE.read_text(encoding="utf-8"), flags=re.M)

PUBLIC = (
    "puredetok",
    "puredetok.errors",
    "puredetok.stops",
    "puredetok.serving",
    "puredetok.worker",
    "puredetok.client",
    "puredetok_audit.replay",
    "puredetok_audit",
    "puredetok.engines.vllm",
    "puredetok.engines.sglang",
    "puredetok.engines.minisgl",
    "puredetok.streamer",
    "puredetok.testing",
    "puredetok.testing.strategies",
    "puredetok.cli",
)
"""The public modules: the top-level face and the namespaces a user imports (as attrs keeps
``validators`` and ``exceptions``); every other module is private, an underscore in its path."""

PICKLE_PATHS = ("puredetok.core", "puredetok.core.codec")
"""Not API: the path that pickles of states made before the core moved name (see :mod:`puredetok.core`)."""

NAMESPACES = ("puredetok.engines",)
"""Packages that only hold public modules: nothing of their own to document."""

MAX_NAMES = 150
"""At most this many public names outside the top-level face: each one a promise to keep."""


def public_names(module: str) -> list[str]:
    names = getattr(importlib.import_module(module), "__all__", None)
    assert names is not None, f"{module} has no __all__"
    return list(names)


def all_modules() -> list[str]:
    return sorted(
        info.name
        for package in (puredetok, puredetok_audit)
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
        if not info.name.endswith("__main__")
    )


def test_the_page_documents_the_public_modules_and_no_other() -> None:
    """At most 15: a module in the reference is a namespace users import and we keep."""
    assert DOCUMENTED == list(PUBLIC)
    assert len(PUBLIC) <= 15


def test_every_other_module_is_private() -> None:
    """An underscore in its path: out of the API reference, free to move (h11's ``_state``)."""
    public = [
        module
        for module in all_modules()
        if module not in PUBLIC
        and module not in PICKLE_PATHS + NAMESPACES
        and not any(part.startswith("_") for part in module.split("."))
    ]
    assert public == []


def _defined_names(module: str) -> set[str]:
    """The public names a module's own text binds at its top, what a reader takes for its API: its
    definitions, and in a package's ``__init__`` (a face) what it imports too."""
    path = Path(str(importlib.import_module(module).__file__))
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and path.name == "__init__.py" and node.module:
            names |= {alias.asname or alias.name for alias in node.names}
    return {name for name in names if not name.startswith("_")}


@pytest.mark.parametrize("module", PUBLIC)
def test_a_public_module_lists_every_public_name_it_binds(module: str) -> None:
    """``__all__`` is the one list (the API reference renders it): a name added to a public module
    without being listed there, or listed without being there, fails here."""
    listed = public_names(module)
    assert len(listed) == len(set(listed)), f"{module}: a name listed twice"
    unlisted = _defined_names(module) - set(listed) - {"annotations"}
    assert not unlisted, f"{module} binds public names it does not list in __all__: {sorted(unlisted)}"
    missing = [name for name in listed if not hasattr(importlib.import_module(module), name)]
    assert not missing, f"{module} lists names it does not have: {missing}"


@pytest.mark.parametrize("module", PUBLIC)
def test_a_public_class_is_named_by_a_public_path(module: str) -> None:
    """Where pickles and reprs find it: a public module, never the private one that may move.
    Messages aside (msgspec Structs): msgspec and ``typing`` read their string annotations in the
    module their ``__module__`` names, so they keep theirs; the wire never names a module."""
    namespace = importlib.import_module(module)
    private = [
        f"{name}: {value.__module__}"
        for name in public_names(module)
        if isinstance(value := getattr(namespace, name), type)
        and value.__module__.startswith("puredetok")
        and value.__module__ not in PUBLIC
        and not issubclass(value, msgspec.Struct)
    ]
    assert not private


def test_at_most_150_public_names_outside_the_top_level_face() -> None:
    face = set(puredetok.__all__)
    outside = [
        f"{module}.{name}" for module in PUBLIC[1:] for name in public_names(module) if name not in face
    ]
    assert len(outside) <= MAX_NAMES, f"{len(outside)} public names outside the face"


@pytest.fixture(scope="module")
def packages() -> dict[str, griffe.Module]:
    """puredetok's and puredetok-audit's trees, as mkdocstrings reads them (mkdocs.yml's paths)."""
    loader = griffe.GriffeLoader(search_paths=[str(ROOT / "src"), str(ROOT / "puredetok-audit" / "src")])
    loaded = {name: loader.load(name) for name in ("puredetok", "puredetok_audit")}
    loader.resolve_aliases()
    assert all(isinstance(tree, griffe.Module) for tree in loaded.values())
    return loaded  # type: ignore[return-value]


@pytest.mark.parametrize("module", DOCUMENTED)
def test_every_public_name_has_a_docstring(packages: dict[str, griffe.Module], module: str) -> None:
    top, _, rest = module.partition(".")
    node = packages[top][rest] if rest else packages[top]
    assert node.docstring is not None and node.docstring.value.strip()
    missing = []
    for name in public_names(module):
        member = node[name]
        target = member.final_target if isinstance(member, griffe.Alias) else member
        if target.docstring is None or not target.docstring.value.strip():
            missing.append(name)
    assert not missing, f"{module}: no docstring for {missing}"


def test_the_built_page_has_an_entry_for_every_public_name(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    html = (tmp_path / "api.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'id="(puredetok[\w.]*)"', html))
    missing = [
        f"{module}.{name}"
        for module in DOCUMENTED
        for name in public_names(module)
        if f"{module}.{name}" not in anchors
    ]
    assert not missing
    assert ":class:`" not in html and ":func:`" not in html  # Sphinx roles are shown as code
