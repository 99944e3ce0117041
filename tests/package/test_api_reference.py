"""docs/api.md: the API reference is generated from the docstrings of every public name."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import griffe
import pytest

import puredetok
import puredetok.audit
import puredetok.audit.formats
import puredetok.client
import puredetok.engines
import puredetok.files
import puredetok.replay
import puredetok.serving
import puredetok.worker

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "api.md"
DOCUMENTED = re.findall(r"^::: ([\w.]+)$", PAGE.read_text(encoding="utf-8"), flags=re.M)


def public_names(module: str) -> list[str]:
    names = getattr(importlib.import_module(module), "__all__", None)
    assert names is not None, f"{module} has no __all__"
    return list(names)


ROOMS = (
    puredetok.serving,
    puredetok.worker,
    puredetok.client,
    puredetok.replay,
    puredetok.audit,
    puredetok.audit.formats,
    puredetok.engines,
    puredetok.files,
)
"""The rooms whose every module is documented (a room's sub-room is one of them)."""


def test_the_page_documents_every_public_module() -> None:
    """The package, its errors, the stop layer, every module of the serving, worker, client, replay,
    audit, engines and files rooms, the streamers, the conformance kit and the command line (the core's own
    modules are implementation: the package re-exports them)."""
    adapters = [
        f"{room.__name__}.{info.name}"
        for room in ROOMS
        for info in pkgutil.iter_modules(room.__path__)
        if not info.name.startswith("_") and not info.ispkg
    ]
    wanted = [
        "puredetok",
        "puredetok.errors",
        "puredetok.stops",
        *adapters,
        "puredetok.streamer",
        "puredetok.testing",
        "puredetok.testing.strategies",
        "puredetok.cli",
    ]
    assert sorted(DOCUMENTED) == sorted(wanted)


@pytest.fixture(scope="module")
def package() -> griffe.Module:
    loaded = griffe.load("puredetok", search_paths=[str(ROOT / "src")], resolve_aliases=True)
    assert isinstance(loaded, griffe.Module)
    return loaded


@pytest.mark.parametrize("module", DOCUMENTED)
def test_every_public_name_has_a_docstring(package: griffe.Module, module: str) -> None:
    node = package if module == "puredetok" else package[module.removeprefix("puredetok.")]
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
