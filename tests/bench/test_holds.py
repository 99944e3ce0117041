"""The byte-fallback hold measured on real text (benchmarks.holds, docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.holds import hold_stats, hold_table, main
from helpers import _folder, tokenizer

DOCS = Path(__file__).parents[2] / "docs" / "benchmarks.md"


def test_the_table_in_the_docs_is_what_the_script_measures() -> None:
    page = DOCS.read_text(encoding="utf-8")
    documented = page.split("<!-- holds-table -->\n", 1)[1].split("\n<!-- /holds-table -->", 1)[0]
    names = {"Llama-2": "llama2", "Mistral v0.3": "mistral_v03", "Phi-3": "phi3_mini"}
    assert hold_table({label: tokenizer(name) for label, name in names.items()}) == documented


def test_a_run_is_held_until_it_ends_and_the_cap_releases_it() -> None:
    text = "x 🦩🦩 y"  # Llama-2 spells each flamingo with four <0xNN> tokens
    held = hold_stats(tokenizer("llama2"), text)
    capped = hold_stats(tokenizer("llama2"), text, max_byte_run=4)
    assert held.exact and capped.exact
    # Without a cap, the first flamingo waits for the whole run (4 more tokens, then " y").
    assert max(held.delays) == 5 and held.runs == (8,) and max(held.held_characters) == 2
    assert max(capped.delays) == 0 and capped.held_characters == ()  # sent at its fourth byte
    assert hold_stats(tokenizer("qwen3"), text).delays == (0,) * len(text)  # byte-level: no wait


def test_the_script_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([f"Llama-2={_folder('llama2')}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Cells with three figures are median / p90 / max.")
    assert "| Llama-2 | rare CJK | no cap |" in out
