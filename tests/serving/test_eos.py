"""EOS ids: the tokenizer's own plus its folder's generation_config.json, read locally."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers import tokenizer
from puredetok.serving._eos import GENERATION_CONFIG, eos_token_ids


class Fake:
    """Just the two attributes eos_token_ids reads."""

    def __init__(self, eos_token_id: Any, name_or_path: Any) -> None:
        self.eos_token_id = eos_token_id
        self.name_or_path = name_or_path


@pytest.mark.parametrize(
    ("name", "ids"),
    [
        ("qwen3", {151645, 151643}),  # <|im_end|> (tokenizer) + <|endoftext|> (generation config)
        ("mistral_v03", {2}),
        ("gpt2", {50256}),
        ("distilbert_base_uncased", set()),
    ],
)
def test_real_tokenizers(name: str, ids: set[int]) -> None:
    assert eos_token_ids(tokenizer(name)) == frozenset(ids)


def test_a_raw_tokenizers_tokenizer_has_none() -> None:
    assert eos_token_ids(tokenizer("qwen3").backend_tokenizer) == frozenset()


def test_generation_config_forms(tmp_path: Path) -> None:
    config = tmp_path / GENERATION_CONFIG
    config.write_text(json.dumps({"eos_token_id": [5, 6]}))
    assert eos_token_ids(Fake(None, str(tmp_path))) == {5, 6}
    config.write_text(json.dumps({"eos_token_id": 9, "bos_token_id": 1}))
    assert eos_token_ids(Fake(3, str(tmp_path))) == {3, 9}
    config.write_text(json.dumps({"temperature": 0.7}))
    assert eos_token_ids(Fake(3, str(tmp_path))) == {3}
    # A hub-style name that is not a local folder is never looked up.
    assert eos_token_ids(Fake(3, "Qwen/Qwen3-8B")) == {3}


@pytest.mark.parametrize(
    "content",
    ["{not json", "[1, 2]", '{"eos_token_id": "2"}', '{"eos_token_id": [2, -1]}', '{"eos_token_id": true}'],
)
def test_a_broken_generation_config_is_a_clear_error(tmp_path: Path, content: str) -> None:
    (tmp_path / GENERATION_CONFIG).write_text(content)
    with pytest.raises(ValueError, match=GENERATION_CONFIG):
        eos_token_ids(Fake(2, str(tmp_path)))


def test_a_bad_tokenizer_eos_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="tokenizer"):
        eos_token_ids(Fake("</s>", None))
