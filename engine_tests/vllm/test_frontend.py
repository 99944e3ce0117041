"""vLLM's own front end, end to end in fresh processes: nothing but the installed package makes
``LLM`` / ``AsyncLLM``'s ``OutputProcessor`` detokenize with puredetok, and the off switches
work there (``frontend.py`` builds the front end as ``AsyncLLM`` does, on vLLM's CPU platform)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import helpers

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "max_position_embeddings": 4096,
    "torch_dtype": "float32",
    "vocab_size": 151936,
}
"""A one-layer model's ``config.json`` (no weights: the front end loads none)."""

PROMPT, OUTPUT = [9707, 1879, 11162], [234, 114, 374, 47251]
"""Qwen3: ``"Hello world \\ufffd"`` (the prompt ends inside "🌶"), then the rest of it and
``" is spicy"``: vLLM's own detokenizer sends the prompt's text again."""

OURS, VLLMS = "🌶 is spicy", "Hello world 🌶 is spicy"


@pytest.fixture(scope="module")
def model_folder() -> Iterator[Path]:
    """Qwen3's tokenizer files and a small ``config.json``."""
    folder = Path(tempfile.mkdtemp(prefix="puredetok-vllm-model-"))
    for file in helpers._folder("qwen3").iterdir():
        if file.is_file():
            shutil.copyfile(file, folder / file.name)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_front_end_of_llm_and_asyncllm_detokenizes_with_puredetok(model_folder: Path) -> None:
    """In fresh processes (started together, so their imports of vLLM overlap): the installed
    entry point alone makes the ``OutputProcessor`` that ``AsyncLLM`` builds, over the tokenizer
    vLLM's renderer wraps in its thread pool, hand out puredetok's detokenizer, and the client gets
    the exact text; ``VLLM_PLUGINS`` without puredetok or ``PUREDETOK_VLLM=0`` leave vLLM's own
    (which sends the prompt's text again); with ``skip_tokenizer_init`` vLLM's do-nothing
    detokenizer, ids only, and nothing fails."""
    script = str(Path(__file__).with_name("frontend.py"))
    base = {k: v for k, v in os.environ.items() if k not in ("VLLM_PLUGINS", "PUREDETOK_VLLM")}
    base["VLLM_TARGET_DEVICE"] = "cpu"
    cases = {
        "on": ({}, []),
        "allow-list": ({"VLLM_PLUGINS": "lora_filesystem_resolver"}, []),
        "ours off": ({"PUREDETOK_VLLM": "0"}, []),
        "no tokenizer": ({}, ["--skip-tokenizer-init"]),
    }
    running = {
        label: subprocess.Popen(
            [sys.executable, script, str(model_folder), json.dumps(PROMPT), json.dumps(OUTPUT), *extra],
            env={**base, **variables},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for label, (variables, extra) in cases.items()
    }
    got = {}
    for label, process in running.items():
        out, err = process.communicate(timeout=900)
        assert process.returncode == 0, f"{label}: {err[-3000:]}"
        got[label] = json.loads(out.strip().splitlines()[-1])
    assert got["on"]["registered"] and got["on"]["tokenizer"].startswith("TokenizerPool")
    assert (got["on"]["detokenizer"], got["on"]["text"]) == ("PuredetokIncrementalDetokenizer", OURS)
    for label in ("allow-list", "ours off"):
        assert not got[label]["registered"]
        assert (got[label]["detokenizer"], got[label]["text"]) == ("FastIncrementalDetokenizer", VLLMS)
    assert got["no tokenizer"]["registered"]
    assert (got["no tokenizer"]["detokenizer"], got["no tokenizer"]["text"]) == ("IncrementalDetokenizer", "")
    assert all(result["ids"] == OUTPUT for result in got.values())
