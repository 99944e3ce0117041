"""What the package says of itself: its version, the description a package index shows, and the
extras the documentation's examples need."""

from __future__ import annotations

import ast
import doctest
import email.parser
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import puredetok

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


def test_the_version_is_the_installed_distributions() -> None:
    assert puredetok.__version__ == importlib.metadata.version("puredetok") == PROJECT["version"]


def test_a_source_tree_never_installed_says_its_version_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert puredetok._version() == "0+unknown"


@pytest.fixture(scope="module")
def wheel_metadata(tmp_path_factory: pytest.TempPathFactory) -> email.message.Message:
    """The METADATA of the wheel, as hatchling prepares it from this tree (its PEP 517 hook)."""
    out = tmp_path_factory.mktemp("metadata")
    build = (
        "import sys; from hatchling.build import prepare_metadata_for_build_wheel as p; print(p(sys.argv[1]))"
    )
    folder = subprocess.run(
        [sys.executable, "-c", build, str(out)], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    return email.parser.Parser().parsestr((out / folder / "METADATA").read_text(encoding="utf-8"))


def test_the_wheels_description_reads_right_on_a_package_index(wheel_metadata: email.message.Message) -> None:
    """The README less its source-checkout commands (it still opens with them), no relative link
    (the documentation is named by its paths in the source distribution), every section kept."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    opening = readme.splitlines()[2:5]
    assert opening[0] == "```sh"
    assert [line.split("#")[0].strip() for line in opening[1:]] == [
        "python3 tasks.py demo",
        "python3 tasks.py test",
    ]
    description = wheel_metadata.get_payload()
    assert isinstance(description, str)
    assert wheel_metadata["Description-Content-Type"] == "text/markdown"
    assert wheel_metadata["Version"] == PROJECT["version"]
    assert description.startswith("# puredetok\n\n**puredetok** turns the token ids")
    assert "tasks.py demo" not in description and "<!--" not in description
    targets = re.findall(r"\]\(([^)]*)\)", description) + re.findall(
        r"(?:href|src)=\"([^\"]*)\"", description
    )
    assert [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)] == []
    assert "(`docs/stops.md`)" in description and "`docs/engines/vllm.md`" in description
    headings = [line for line in readme.splitlines() if line.startswith("## ")]
    assert headings and [line for line in description.splitlines() if line.startswith("## ")] == headings
    assert description.rstrip().endswith("where the documentation ships (`docs/`, built with mkdocs).")


def test_the_description_is_made_from_the_readme_alone() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from hatch_build import START, description
    finally:
        sys.path.remove(str(ROOT / "tools"))
    text = f"# x\n\nskipped [a](a.md)\n{START}\n\nsee [A](docs/a.md#b), [docs/c.md](docs/c.md), [w](https://w.org/x)\n"
    assert description(text).startswith("# x\n\nsee A (`docs/a.md`), `docs/c.md`, [w](https://w.org/x)\n")
    code = f"# x\n{START}\n```python\nx = y[0](1)  # [a](b)\n```\n"
    assert "# [a](b)" in description(code)
    with pytest.raises(ValueError, match="no line"):
        description("# x\n\ntext\n")
    with pytest.raises(ValueError, match="title"):
        description(f"text\n{START}\n")


def _requirements(extras: set[str]) -> set[str]:
    """The distributions that installing puredetok with ``extras`` brings, all the way down:
    pyproject.toml's own requirements, then each installed distribution's."""
    own = [*PROJECT["dependencies"], *(r for e in extras for r in PROJECT["optional-dependencies"][e])]
    seen: set[str] = set()
    todo: list[tuple[str | None, frozenset[str]]] = [(None, frozenset())]
    while todo:
        name, wanted = todo.pop()
        try:
            requires = own if name is None else importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is not None and not any(marker.evaluate({"extra": e}) for e in wanted | {""}):
                continue
            dependency = canonicalize_name(requirement.name)
            if dependency not in seen:
                seen.add(dependency)
                todo.append((dependency, frozenset(requirement.extras)))
    return seen


def _examples(page: Path) -> Iterator[ast.Module]:
    """The ```python blocks of a page (a doctest block as its sources)."""
    for block in re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M):
        if block.lstrip().startswith(">>>"):
            block = "".join(example.source for example in doctest.DocTestParser().get_examples(block))
        yield ast.parse(block)


def _imported(tree: ast.Module, top_level: bool) -> set[str]:
    """The modules ``tree`` imports (``top_level``: only its module body's own import lines)."""
    nodes = tree.body if top_level else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _module_file(name: str) -> Path | None:
    for source in (ROOT / "src", ROOT / "puredetok-audit" / "src"):
        path = source / Path(*name.split("."))
        for candidate in (path / "__init__.py", path.with_suffix(".py")):
            if candidate.is_file():
                return candidate
    return None


def _third_party(names: set[str]) -> set[str]:
    """The top-level modules outside the standard library that importing ``names`` imports:
    puredetok's and puredetok-audit's own modules followed through the imports at their top level."""
    found, todo, seen = set(), list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        root = name.split(".")[0]
        if root == "puredetok_audit":
            found.add(root)
        elif root != "puredetok":
            if root not in sys.stdlib_module_names:
                found.add(root)
            continue
        path = _module_file(name)
        if path is not None:
            todo.extend(_imported(ast.parse(path.read_text(encoding="utf-8")), top_level=True))
    return found


OWN = {"puredetok_audit": {"puredetok-audit"}}
"""The checkers' package, editable here (where ``packages_distributions`` does not see it): an
example that imports it needs its page to name the extra that brings it."""


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_example_imports_only_what_the_extras_its_page_names_bring(page: Path) -> None:
    """A docs example's imports (and those of the puredetok modules it imports) come with
    puredetok itself or with an extra its page names (``puredetok[testing]``: hypothesis, and
    pytest for the conformance kit's pytest example)."""
    extras = set(re.findall(r"puredetok\[(\w+)\]", page.read_text(encoding="utf-8")))
    brought = _requirements(extras)
    distributions = importlib.metadata.packages_distributions()
    for tree in _examples(page):
        for module in sorted(_third_party(_imported(tree, top_level=False))):
            names = {canonicalize_name(d) for d in distributions.get(module, [])} | OWN.get(module, set())
            assert names & brought, (page.name, module, sorted(names), sorted(extras))
