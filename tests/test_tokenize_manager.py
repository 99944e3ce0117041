"""TokenizeManager: plain text and chat messages to int32 ids, errors per request (SPEC 4, 7)."""

from __future__ import annotations

from array import array
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import tokenizer
from puredetok.adapters.messages import TokenizeMsg
from puredetok.adapters.tokenize_manager import TokenizeError, TokenizeManager
from puredetok.testing.strategies import MULTILINGUAL
from test_vectors import SEED_IDS

HELLO = ({"role": "user", "content": "Hello"},)


def manager(name: str = "qwen3") -> TokenizeManager:
    return TokenizeManager(tokenizer(name))


def test_spec_chat_vector_renders_through_the_model_template() -> None:
    qwen = manager()
    assert qwen.render_chat(list(HELLO)) == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    [result] = qwen.tokenize([TokenizeMsg("a", messages=HELLO)])
    assert result.error is None and result.input_ids is not None
    expected = tokenizer("qwen3").encode(
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    assert list(result.input_ids) == expected


def test_ids_are_int32_arrays() -> None:
    [result] = manager().tokenize([TokenizeMsg(1, text="鱻䨻🦩 is rare, 推理 naïve")])
    assert isinstance(result.input_ids, array)
    assert result.input_ids.itemsize == 4 and result.input_ids.typecode == "i"
    assert list(result.input_ids) == SEED_IDS


def test_template_options_reach_the_template() -> None:
    qwen = manager()
    [thinking, plain] = qwen.tokenize(
        [
            TokenizeMsg(1, messages=HELLO, template_options={"enable_thinking": False}),
            TokenizeMsg(2, messages=HELLO),
        ]
    )
    assert thinking.input_ids is not None and plain.input_ids is not None
    text = tokenizer("qwen3").decode(list(thinking.input_ids))
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert list(thinking.input_ids)[: len(plain.input_ids)] == list(plain.input_ids)


def test_a_tokenizer_without_chat_template_fails_that_request_only() -> None:
    gpt2 = manager("gpt2")
    results = gpt2.tokenize([TokenizeMsg(1, messages=HELLO), TokenizeMsg(2, text="Hello")])
    assert results[0].input_ids is None and results[0].error is not None
    assert "no chat template" in results[0].error
    assert results[1].error is None and list(results[1].input_ids or []) == tokenizer("gpt2").encode("Hello")


BAD_CHATS: list[tuple[Any, str]] = [
    ((), "non-empty list"),
    ("Hello", "non-empty list"),
    (({"content": "Hello"},), "no role"),
    (({"role": "", "content": "Hello"},), "no role"),
    (({"role": 5, "content": "Hello"},), "no role"),
    (({"role": "user"},), "no content"),
    (({"role": "user", "content": ""},), "empty content"),
    (({"role": "user", "content": []},), "empty content"),
    (({"role": "user", "content": 42},), "must be text"),
    (({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},), "non-text"),
    (({"role": "user", "content": [{"type": "text"}]},), "non-text"),
    (({"role": "user", "content": ["Hello"]},), "must be an object"),
    (("not a message",), "must be an object"),
    (({"role": "robot", "content": "Hello"},), "does not accept that role"),
]


@pytest.mark.parametrize(("chat", "why"), BAD_CHATS)
def test_malformed_messages_fail_that_request_only(chat: Any, why: str) -> None:
    results = manager().tokenize(
        [TokenizeMsg(1, text="ok"), TokenizeMsg(2, messages=chat), TokenizeMsg(3, text="ok")]
    )
    assert [r.uid for r in results] == [1, 2, 3]
    assert results[1].input_ids is None and results[1].error is not None and why in results[1].error
    assert results[0].error is None and results[2].error is None


@pytest.mark.parametrize(
    ("msg", "why"),
    [
        (TokenizeMsg(1), "exactly one"),
        (TokenizeMsg(1, text="a", messages=HELLO), "exactly one"),
        (TokenizeMsg(1, text=""), "empty text"),
        (TokenizeMsg(1, text="a", template_options={"enable_thinking": False}), "chat messages only"),
        (TokenizeMsg(1, messages=HELLO, template_options={"tokenize": True}), "set by the tokenize manager"),
        (TokenizeMsg(1, messages=HELLO, template_options={"add_generation_prompt": False}), "set by"),
    ],
)
def test_bad_requests_get_a_clear_error(msg: TokenizeMsg, why: str) -> None:
    [result] = manager().tokenize([msg])
    assert result.input_ids is None and result.error is not None and why in result.error


def test_text_parts_are_joined_and_tool_calls_may_have_no_content() -> None:
    qwen = manager()
    parts = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]
    assert "Hello\nthere" in qwen.render_chat([{"role": "user", "content": parts}])
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"function": {"name": "f", "arguments": {}}}],
    }
    rendered = qwen.render_chat([{"role": "user", "content": "Hi"}, call, {"role": "tool", "content": "42"}])
    assert '"name": "f"' in rendered and "42" in rendered


def test_render_chat_raises_the_same_errors() -> None:
    with pytest.raises(TokenizeError, match="no chat template"):
        manager("gpt2").render_chat(list(HELLO))


@pytest.mark.parametrize("name", ["qwen3", "llama2", "distilbert_base_uncased"])
@given(
    texts=st.lists(
        st.text(st.sampled_from(list(MULTILINGUAL)), min_size=1, max_size=30), min_size=1, max_size=6
    )
)
def test_a_batch_encodes_each_text_as_the_tokenizer_does(name: str, texts: list[str]) -> None:
    tok = tokenizer(name)
    results = manager(name).tokenize(
        [TokenizeMsg(i, text=t, add_special_tokens=i % 2 == 0) for i, t in enumerate(texts)]
    )
    for i, (text, result) in enumerate(zip(texts, results)):
        assert result.uid == i and result.input_ids is not None
        assert list(result.input_ids) == tok.encode(text, add_special_tokens=i % 2 == 0)


def test_a_raw_tokenizers_tokenizer_works_too() -> None:
    raw = tokenizer("qwen3").backend_tokenizer
    [ok, chat] = TokenizeManager(raw).tokenize(
        [TokenizeMsg(1, text="推理 naïve"), TokenizeMsg(2, messages=HELLO)]
    )
    assert list(ok.input_ids or []) == raw.encode("推理 naïve", add_special_tokens=True).ids
    assert chat.error is not None and "no chat template" in chat.error


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["role", "content", "type", "text", "x"]), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(chat=st.lists(json_like, max_size=4).map(tuple))
def test_any_junk_gives_ids_or_an_error_never_an_exception(chat: tuple[Any, ...]) -> None:
    [result] = manager().tokenize([TokenizeMsg(1, messages=chat)])
    assert (result.input_ids is None) != (result.error is None)


def test_a_text_the_tokenizer_refuses_fails_alone() -> None:
    results = manager().tokenize(
        [TokenizeMsg(1, text="ok"), TokenizeMsg(2, text="bad \ud800"), TokenizeMsg(3, text="fine")]
    )
    assert (
        results[1].input_ids is None and results[1].error is not None and "cannot encode" in results[1].error
    )
    assert list(results[0].input_ids or []) == tokenizer("qwen3").encode("ok")
    assert list(results[2].input_ids or []) == tokenizer("qwen3").encode("fine")
