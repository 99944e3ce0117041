"""The test vectors, on the embedded Qwen3 tokenizer."""

from __future__ import annotations

from helpers import codec, reference, stream, tokenizer
from puredetok import feed, finish, start
from puredetok.serving._loading import default_tokenizer_path, load_tokenizer

SEED = "鱻䨻🦩 is rare, 推理 naïve"
SEED_IDS = [100024, 119, 128237, 119, 123918, 102, 374, 8848, 11, 46602, 101, 21887, 94880, 586]
SEED_DELTAS = ["", "鱻", "", "䨻", "", "🦩", " is", " rare", ",", " ", "推", "理", " naï", "ve"]
SECOND = "推理引擎 😀 streams text: naïve café, 1+1=2.\n第二行结束。"


def test_seed_ids() -> None:
    assert list(tokenizer("qwen3").encode(SEED, add_special_tokens=False)) == SEED_IDS


def test_seed_deltas_token_by_token() -> None:
    state, deltas = stream(start(codec("qwen3")), SEED_IDS)
    assert deltas == SEED_DELTAS
    assert finish(state) == ""
    assert "".join(deltas) == reference("qwen3", SEED_IDS) == SEED


def test_second_vector_streams_exactly_without_replacement_characters() -> None:
    ids = list(tokenizer("qwen3").encode(SECOND, add_special_tokens=False))
    state, deltas = stream(start(codec("qwen3")), ids)
    assert "".join(deltas) + finish(state) == reference("qwen3", ids) == SECOND
    assert not any("\ufffd" in delta for delta in deltas)
    assert finish(state) == ""  # nothing is left behind for the request
    assert feed(start(codec("qwen3")), ids)[1] == SECOND


def test_chat_template_renders_as_specified() -> None:
    rendered = tokenizer("qwen3").apply_chat_template(
        [{"role": "user", "content": "Hello"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"


def test_embedded_default_tokenizer_is_the_qwen3_files() -> None:
    folder = default_tokenizer_path()
    assert (folder / "vocab.json").is_file() and (folder / "LICENSE").is_file()
    assert list(load_tokenizer(None).encode(SEED, add_special_tokens=False)) == SEED_IDS
