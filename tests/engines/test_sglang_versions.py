"""The SGLang versions the plugin was tested decoding in, the one its engine tests pin and the bound
of the ``sglang`` extra agree (``puredetok.engines.sglang`` imports SGLang only when SGLang loads
it, so this runs without SGLang)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from puredetok.engines import sglang as plugin

ROOT = Path(__file__).resolve().parents[2]


def test_every_tested_sglang_meets_the_extra_and_the_pinned_one_is_tested() -> None:
    """``pip install puredetok[sglang]`` beside a tested SGLang (0.5.22 too) leaves that SGLang as
    it is, and the version CI runs the engine tests on is among the tested ones."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    [extra] = [Requirement(line) for line in extras["sglang"]]
    assert extra.name == "sglang"
    assert [v for v in plugin.TESTED_VERSIONS if v not in extra.specifier] == []
    pins = (ROOT / "engine_tests" / "sglang" / "requirements.txt").read_text().splitlines()
    [pinned] = [Requirement(line) for line in pins if line.startswith("sglang==")]
    assert str(pinned.specifier).removeprefix("==") in plugin.TESTED_VERSIONS
