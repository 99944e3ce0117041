"""The bench of vLLM's ``OutputProcessor`` (``python -m benchmarks.engines.vllm``) runs in vLLM's
environment, prints its ratios, and with ``--parts`` where puredetok's share goes, the plugin as it
was afterwards (a bench leaves no part of the plugin replaced)."""

from __future__ import annotations

import re

import pytest

import helpers
from benchmarks.engines import vllm as bench
from driver import plugin


def test_the_bench_prints_the_share_ratio_and_its_parts(capsys: pytest.CaptureFixture[str]) -> None:
    shipped = (plugin.advance, plugin.open_like)
    folder = str(helpers._folder("llama2"))
    code = bench.main(
        ["--tokenizer", folder, "--requests", "4", "--tokens", "16", "--repeats", "1", "--parts"]
    )
    out = capsys.readouterr().out
    assert code == 0
    ratios = r"share ratio -?\d+\.\d{3} - -?\d+\.\d{3}"
    assert re.search(rf"llama2\S* +{ratios} \(target <= 0\.2\)", out)
    for part in bench.PARTS:
        assert re.search(rf"llama2\S* +the plugin with {part}: {ratios}", out)
    assert (plugin.advance, plugin.open_like) == shipped
    assert plugin.registered()


def test_the_bench_refuses_a_folder_whose_vocabulary_is_packed(capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM's loader builds a tokenizer of its special tokens alone from such a folder; the bench
    # then made requests of no ids and died inside vLLM's SamplingParams.
    folder = helpers.DATA / "llama2"
    assert (folder / "tokenizer.json.gz").exists() and not (folder / "tokenizer.json").exists()
    with pytest.raises(SystemExit) as raised:
        bench.main(["--tokenizer", str(folder), "--requests", "4", "--tokens", "16", "--repeats", "1"])
    assert raised.value.code == 2
    assert "tokenizer.json.gz must be uncompressed" in capsys.readouterr().err
