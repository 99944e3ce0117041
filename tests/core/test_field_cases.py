"""Cases another engine got wrong in the field that concern the core, each as a test (the stop layer
and the adapters have their own). Each test's docstring names the engine and, where it has one, its
public bug report."""

from __future__ import annotations

from os.path import commonprefix

import pytest

import puredetok
from helpers import BYTE_LEVEL, SENTENCEPIECE, byte_ids, codec, continuation, reference, stream, tokenizer
from puredetok import InvalidTokenError, feed, finish, start, step
from test_release_differences import installed_release_skips_bpe_cleanup


def enc(name: str, text: str) -> list[int]:
    return list(tokenizer(name).encode(text, add_special_tokens=False))


def streamed(name: str, ids: list[int], skip: bool = False) -> tuple[list[str], str]:
    state, deltas = stream(start(codec(name, skip)), ids)
    return deltas, finish(state)


def assert_exact(name: str, ids: list[int], skip: bool = False) -> list[str]:
    deltas, tail = streamed(name, ids, skip)
    full = reference(name, ids, skip)
    emitted = ""
    for delta in deltas:
        emitted += delta
        assert full.startswith(emitted)
    assert emitted + tail == full
    return deltas


@pytest.mark.parametrize("name", BYTE_LEVEL)
def test_sglang_31598_no_duplicate_after_replacement_recovery(name: str) -> None:
    """sglang 31598: "A 世�", "A 世a�", "A 世ab" must give "A 世ab", not "A 世世ab"; and kanji
    followed by kana split across tokens."""
    b = byte_ids(name)
    ids = enc(name, "A 世") + [b[0xE3]] + enc(name, "a") + [b[0xE3], b[0x81], b[0x82]] + enc(name, "b")
    deltas = assert_exact(name, ids)
    assert "".join(deltas).count("世") == 1
    kana = enc(name, "漢字") + [b[x] for x in "ひらがな".encode()] + enc(name, "カナ")
    assert "".join(assert_exact(name, kana)) == "漢字ひらがなカナ"


@pytest.mark.parametrize("name", ["qwen3", "llama3", "mistral_v03"])
def test_sglang_8031_tokens_that_decode_to_nothing_keep_the_stream_moving(name: str) -> None:
    """sglang 8031: a token decoding to "" stalled the window (quadratic); here the state stays
    small and the text exact."""
    backend = tokenizer(name).backend_tokenizer
    special = next(i for i, added in backend.get_added_tokens_decoder().items() if added.special)
    ids = [special] * 5000 + enc(name, "ok 🦩 done") + [special] * 5000
    state, text = feed(start(codec(name, True)), ids)
    assert text + finish(state) == "ok 🦩 done"
    assert len(repr(state.hold)) < 200


def test_sglang_34740_literal_replacement_characters_stream() -> None:
    """sglang 34740: ids decoding to a literal "�" never committed; they must stream one by one."""
    literal = enc("gpt2", "\ufffd")
    assert reference("gpt2", literal) == "\ufffd"
    state = start(codec("gpt2"))
    for _ in range(1000):
        state, delta = feed(state, literal)
        assert delta == "\ufffd"
    assert finish(state) == ""


@pytest.mark.parametrize("name", ["qwen3", "gpt2", "llama3", "llama2", "mistral_v03"])
def test_sglang_jax_box_drawing_corners_split_across_tokens(name: str) -> None:
    """sglang-jax: "┌" split over tokens came out as "�" and was then swallowed."""
    frame = "┌──┐\n│ok│\n└──┘"
    b = byte_ids(name)
    split = [b[x] for x in "┌".encode()] + enc(name, "──") + [b[x] for x in "┐".encode()]
    assert_exact(name, split)
    text = reference(name, split)
    assert text.lstrip().startswith("┌") and text.endswith("┐") and "\ufffd" not in text
    assert reference(name, enc(name, frame)) == frame
    assert_exact(name, enc(name, frame))


@pytest.mark.parametrize("name", BYTE_LEVEL + SENTENCEPIECE)
def test_sglang_omni_2124_text_after_a_literal_replacement_character_streams(name: str) -> None:
    """sglang-omni 2124: a literal "�" in the output stalled all later text until the end."""
    ids = enc(name, "prefix \ufffd after the mark")
    deltas = assert_exact(name, ids)
    position = next(i for i, d in enumerate(deltas) if "\ufffd" in d)
    assert "".join(deltas[position + 1 :]).strip()  # later text came before the end


@pytest.mark.parametrize("name", SENTENCEPIECE)
def test_vllm_17448_byte_fallback_runs_that_turn_invalid(name: str) -> None:
    """vLLM 17448: a ByteFallback run that becomes invalid later made DecodeStream raise."""
    b = byte_ids(name)
    cases = [
        [b[0xE4], b[0xB8], b[0xAD]],  # valid
        [b[0xE4], b[0xB8]] + enc(name, "x"),  # ends incomplete: every byte becomes U+FFFD
        [b[0xE4], b[0xB8], b[0xAD], b[0xE4], b[0x41]],  # valid, then poisoned: all U+FFFD
        [b[0x80], b[0x80], b[0xE4], b[0xB8], b[0xAD]],  # invalid from the start
    ]
    for ids in cases:
        assert_exact(name, enc(name, "a") + ids + enc(name, "b"))
        assert_exact(name, ids)


@pytest.mark.parametrize("bad", [-1, 10**12, 2**63])
def test_vllm_21951_invalid_ids_raise_a_clear_error_not_overflow(bad: int) -> None:
    """vLLM 21951: an OverflowError deep in the decoder; here a clear InvalidTokenError."""
    with pytest.raises(InvalidTokenError, match=str(codec("llama3").vocab_size)):
        step(start(codec("llama3")), bad)


@pytest.mark.parametrize("name", BYTE_LEVEL)
@pytest.mark.parametrize("text", ["Hello world 🌶 is spicy", "สวัสดีครับ", "မြန်မာ URGENCY🌶️"])
def test_vllm_48853_prompt_ending_in_a_partial_character_does_not_leak(name: str, text: str) -> None:
    """vLLM 48853: a prompt ending inside a character made the first delta repeat the prompt."""
    b = byte_ids(name)
    raw = text.encode()
    for cut in range(1, len(raw)):
        prompt = [b[x] for x in raw[:cut]]
        output = [b[x] for x in raw[cut:]]
        _, certain = feed(start(codec(name)), prompt)
        state, deltas = stream(start(codec(name), prompt), output)
        assert "".join(deltas) + finish(state) == continuation(name, prompt, output)
        # the prompt's own text and the output's add up to the text; what a stream of the prompt
        # alone sent is a prefix of it (less than the prompt's text where it holds a space that
        # cleanup may still take: transformers 5.0 - 5.6 on Llama-3 and Phi-2)
        shown = commonprefix([reference(name, prompt), text])
        assert shown + "".join(deltas) + finish(state) == text and shown.startswith(certain)
        assert not deltas or not deltas[0].startswith(certain) or certain == ""


@pytest.mark.parametrize("name", ["qwen3", "llama3", "gpt2", "mistral_v03", "llama2", "phi3_mini"])
@pytest.mark.parametrize(
    "text",
    [
        "မြန်မာဘာသာ URGENCY🌶️",  # vLLM PR 9625 (tekken: Burmese, emoji + VS16)
        "你好，世界！这是一个中文输出的测试，推理引擎。",  # vLLM 8627
        "안녕하세요. 한국어 응답을 스트리밍합니다. 띄어쓰기 없이도됩니다" * 3,  # dynamo 12630
        "Swift 社区",  # mlx-swift-examples 252
        "LLMs. It works.\nNext line",  # vLLM PR 984
        "a    b\t\t c  ",  # lmdeploy 992
        "🏳️‍🌈 é e\u0301 👍🏽",  # mlx-swift-lm 612 (clusters built from several code points)
    ],
)
def test_scripts_and_clusters_stream_exactly(name: str, text: str) -> None:
    """Field cases on CJK, Korean, Burmese, sentence boundaries, whitespace runs and grapheme
    clusters: streamed text equals the full decode, compared code point by code point."""
    ids = enc(name, text)
    deltas = assert_exact(name, ids)
    if name not in ("llama2", "phi3_mini") or text.isascii():
        assert "".join(deltas) + streamed(name, ids)[1] == reference(name, ids)


def test_smg_696_long_output_with_periodic_partial_characters_stays_bounded() -> None:
    """smg 696: the window grew on partial UTF-8 and failed around 32k tokens (GLM-5)."""
    ids = enc("qwen3", "这是一段很长的输出，包含表情😀和罕见字鱻。" * 1200)[:32000]
    state, biggest, pieces = start(codec("qwen3")), 0, []
    for token_id in ids:
        state, delta = step(state, token_id)
        pieces.append(delta)
        biggest = max(biggest, len(repr(state.hold)))
    assert "".join(pieces) + finish(state) == reference("qwen3", ids)
    assert biggest < 64


@pytest.mark.parametrize("name", SENTENCEPIECE)
def test_tokenizers_1141_and_transformers_22710_spaces_survive_per_token_streaming(name: str) -> None:
    """tokenizers 1141 / transformers 22710: decoding SentencePiece tokens one at a time drops
    spaces ("Iamtestingout"); streaming keeps them, and strips only the output's first space."""
    ids = enc(name, "I am testing out incremental decoding")
    naive = "".join(tokenizer(name).decode([i]) for i in ids)
    assert " " not in naive.strip()  # the naive way loses them
    assert "".join(assert_exact(name, ids)) == "I am testing out incremental decoding"


@pytest.mark.parametrize("name", SENTENCEPIECE)
def test_transformers_28776_and_lmdeploy_581_first_token_space_after_a_prompt(name: str) -> None:
    """transformers 28776 / lmdeploy 581: the leading space of a continuation is text, not the
    start of a decode; only a fresh stream strips it."""
    # the token itself: how a release encodes " world" differs (Phi-3 on transformers 5.0:
    # "▁" then "▁world")
    prompt, output = enc(name, "Hello"), [tokenizer(name).convert_tokens_to_ids("▁world")]
    state, deltas = stream(start(codec(name), prompt), output)
    assert "".join(deltas) + finish(state) == " world"
    fresh, alone = stream(start(codec(name)), output)
    assert "".join(alone) + finish(fresh) == reference(name, output) == "world"


def test_tokenizers_1705_long_mixed_symbol_prompt() -> None:
    """tokenizers 1705: DecodeStream raised on a long mixed-symbol Llama-3 prompt."""
    text = "".join(chr(c) for c in range(0x20, 0x2FF)) + " ∑∫√∞≠≤≥ ⟨ψ|φ⟩ → ⇒ ♠♣♥♦ 😀🙃 \u200d\ufeff" * 5
    assert_exact("llama3", enc("llama3", text))


def test_transformers_32575_cleanup_is_not_monotone_and_still_exact() -> None:
    """transformers 32575: under cleanup decode([1232,364]) = "': '" but decode([1232,364,1874])
    = "':'search": what a later token can change is held back."""
    from transformers import AutoTokenizer

    forced = AutoTokenizer.from_pretrained(
        tokenizer("llama3").name_or_path,
        clean_up_tokenization_spaces=True,
        clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output=True,
    )
    c = puredetok.codec_for(forced)
    assert c.clean_up_tokenization_spaces
    ids = [1232, 364, 1874]
    assert forced.decode(ids[:2]) == "': '" and forced.decode(ids) == "':'search"
    state, emitted = start(c), ""
    for token_id in ids:
        state, delta = step(state, token_id)
        emitted += delta
        assert forced.decode(ids).startswith(emitted)
    assert emitted + finish(state) == "':'search"


def test_transformers_42916_cleanup_setting_follows_transformers() -> None:
    """transformers PR 42916: v5.7 and later ignore cleanup for BPE (5.0 - 5.6 apply it, as to
    any tokenizer); the codec says what really applies on the installed release."""
    bpe = not installed_release_skips_bpe_cleanup()
    assert puredetok.codec_for(tokenizer("llama3")).clean_up_tokenization_spaces == bpe  # config True
    assert (
        puredetok.codec_for(tokenizer("gpt2"), clean_up_tokenization_spaces=True).clean_up_tokenization_spaces
        == bpe
    )
    assert puredetok.codec_for(tokenizer("t5_small")).clean_up_tokenization_spaces  # Unigram: applied
    assert not puredetok.codec_for(
        tokenizer("t5_small"), clean_up_tokenization_spaces=False
    ).clean_up_tokenization_spaces
    assert puredetok.codec_for(
        tokenizer("distilbert_base_uncased"), clean_up_tokenization_spaces=True
    ).clean_up_tokenization_spaces


def test_paddlenlp_9010_and_turbo_fieldfare_118_cleanup_at_window_edges() -> None:
    """PaddleNLP 9010 (" 123" after a space) and turbo-fieldfare 118 (["▁▁▁▁", "."] lost the
    period under cleanup): T5 applies cleanup; the stream equals the decode."""
    vocab = tokenizer("t5_small").backend_tokenizer.get_vocab()
    space, period = vocab["\u2581"], vocab["."]
    for ids in (
        [space] * 4 + [period],
        enc("t5_small", "a . 123 , it ' s"),
        [space, *enc("t5_small", "123")],
    ):
        assert_exact("t5_small", ids)


@pytest.mark.parametrize("name", ["qwen3", "mistral_v03", "t5_small", "distilbert_base_uncased"])
def test_tensorrt_14312_chunked_steps_equal_one_by_one(name: str) -> None:
    """TensorRT-LLM 14312: multi-token steps (stream_interval=8) lost spaces."""
    ids = enc(name, "Kimi says: hello there, it's a fine day. 你好 🦩 " * 4)
    state, deltas = stream(start(codec(name)), ids)
    chunked, texts = start(codec(name)), []
    for i in range(0, len(ids), 8):
        chunked, text = feed(chunked, ids[i : i + 8])
        texts.append(text)
    assert chunked == state and "".join(texts) == "".join(deltas)


def test_vllm_1044_specials_are_skipped_token_by_token() -> None:
    """vLLM PR 1044: skip_special_tokens was ignored by the per-token path."""
    ids = [151644, *enc("qwen3", "user\nHi"), 151645]
    deltas, tail = streamed("qwen3", ids, skip=True)
    assert "".join(deltas) + tail == "user\nHi"
    assert all("<|" not in d for d in deltas)
