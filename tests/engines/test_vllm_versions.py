"""The vLLM versions the plugin was tested on, the one its engine tests pin and the bound of the
``vllm`` extra agree (``puredetok.engines.vllm`` imports vLLM only when vLLM loads it, so this runs
without vLLM)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from puredetok.engines import vllm as plugin

ROOT = Path(__file__).resolve().parents[2]


def test_every_tested_vllm_meets_the_extra_and_the_pinned_one_is_tested() -> None:
    """``pip install puredetok[vllm]`` beside a tested vLLM leaves that vLLM as it is, and the
    version CI runs the engine tests on is among the tested ones."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    [extra] = [Requirement(line) for line in extras["vllm"]]
    assert extra.name == "vllm"
    assert [v for v in plugin.TESTED_VERSIONS if v not in extra.specifier] == []
    pins = (ROOT / "engine_tests" / "vllm" / "requirements.txt").read_text().splitlines()
    [pinned] = [Requirement(line) for line in pins if line.startswith("vllm==")]
    assert str(pinned.specifier).removeprefix("==") in plugin.TESTED_VERSIONS
