"""The "new decoder" checklist of docs/architecture.md, checked: every decoder module and class
model has its own test module, every decoder type of the installed ``tokenizers`` is read by the
config reader and runs in a synthetic tokenizer under G1-G7 and C, and every one is in the docs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tokenizers import decoders

import synthetic
from puredetok._build.config import _FIELDS
from puredetok._build.pyclasses import KNOWN_CLASSES

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "src" / "puredetok"
NOT_MODULES = {"__init__", "base"}
"""``base``: the protocols (decoders), what every class model provides (pyclasses)."""


def _modules(folder: str) -> list[str]:
    """The decoder modules (``_core/decoders``), or the class modules: their readers
    (``_build/pyclasses``) and their stages (``_core/pyclasses``)."""
    paths = [*(PACKAGE / "_core" / folder).glob("*.py"), *(PACKAGE / "_build" / folder).glob("*.py")]
    return sorted({p.stem for p in paths} - NOT_MODULES)


@pytest.mark.parametrize(
    ("folder", "prefix"),
    [("decoders", "test_decoder_"), ("pyclasses", "test_pyclass_")],
    ids=["decoders", "pyclasses"],
)
def test_every_decoder_module_has_its_own_tests(folder: str, prefix: str) -> None:
    missing = [m for m in _modules(folder) if not list((ROOT / "tests").glob(f"*/{prefix}{m}.py"))]
    assert not missing, (
        f"no tests/<room>/{prefix}<module>.py for {missing} (docs/architecture.md, new decoder)"
    )


def _library_types() -> set[str]:
    found = set()
    for name in dir(decoders):
        value = getattr(decoders, name)
        if isinstance(value, type) and issubclass(value, decoders.Decoder) and value is not decoders.Decoder:
            found.add(name)
    return found


def test_every_decoder_type_of_the_library_is_read() -> None:
    """A decoder type a newer ``tokenizers`` adds fails here until it is modelled (or listed below
    as one puredetok leaves to the fallback, with the reason)."""
    left_to_the_fallback: dict[str, str] = {}
    assert _library_types() - set(_FIELDS) - set(left_to_the_fallback) == set()


def _types(config: Any) -> Iterator[str]:
    if isinstance(config, dict):
        yield str(config.get("type"))
        for inner in config.get("decoders") or ():
            yield from _types(inner)


def test_every_decoder_type_runs_in_a_synthetic_tokenizer() -> None:
    """tests/synthetic.py's exact tokenizers (G1-G7 and C in test_families.py and
    test_synthetic.py) use every decoder type the config reader knows, and no decoder."""
    used: set[str] = set()
    for build in synthetic.EXACT.values():
        decoder = build().decoder
        used |= set(_types(json.loads(decoder.__getstate__()))) if decoder is not None else {"none"}
    assert set(_FIELDS) | {"none"} <= used


def test_every_decoder_is_in_the_docs() -> None:
    architecture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    families = (ROOT / "docs" / "families.md").read_text(encoding="utf-8")
    table = families[families.index("## Every family and class") : families.index("## What `codec_for`")]
    assert [m for m in _modules("decoders") if f"| `{m}` |" not in architecture] == []
    assert [m for m in _modules("pyclasses") if f"`{m}`" not in architecture] == []
    assert [t for t in _FIELDS if t != "Sequence" and f"`{t}`" not in table] == []
    assert [name for _, name in KNOWN_CLASSES if f"`{name}`" not in table] == []
