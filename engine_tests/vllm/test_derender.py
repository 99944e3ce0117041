"""vLLM's streaming derender with the plugin: vLLM's own render server (``vllm launch render``,
built here as vLLM builds it) answers ``/v1/completions/derender`` and
``/v1/chat/completions/derender``, streamed (the client carrying ``stream_state``) and whole,
with the text of ``tokenizer.decode`` after the prompt, on random requests over the shared
tokenizers; vLLM's own code gets some of them wrong (docs/engines/vllm.md counts them)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel
from vllm.entrypoints.scale_out.token_in_token_out.protocol import DerenderStreamState

import helpers
import puredetok.engines._vllm_derender as derender
import puredetok.engines.vllm as plugin
from derender import render_client, stream, whole
from test_plugin import expected

TOKENIZERS = ("qwen3", "llama2", "mistral_v03", "t5_small", "gpt2", "phi3_mini")
"""Byte-level BPE (Qwen3, GPT-2), SentencePiece with byte fallback (Llama-2, Mistral v0.3,
Phi-3) and Unigram with cleanup (T5)."""

HOT_PEPPER = [9707, 1879, 11162], [234, 114, 374, 47251]
"""Qwen3: ``"Hello world \\ufffd"`` (the prompt ends inside "🌶"), then the rest of it and
``" is spicy"``."""


@pytest.fixture
def vllms_own() -> Iterator[None]:
    """Within: vLLM's own derender (the plugin unregistered), then the plugin again."""
    plugin.unregister()
    try:
        yield
    finally:
        plugin.register()


def test_vllms_render_server_derenders_with_puredetok() -> None:
    """The render server, built as ``vllm launch render`` builds it (its engine arguments load
    vLLM's plugins), hooks vLLM's own ``OnlineDerenderer`` class and seed function."""
    client = render_client("qwen3")
    module = sys.modules[derender.MODULE]
    assert derender.registered() and derender.unfit(module) is None
    online = type(client.app.state.online_derenderer)  # type: ignore[attr-defined]
    assert online is module.OnlineDerenderer
    for name in derender.METHODS:
        assert getattr(online, name).puredetok
    assert module._seed_stream_state.puredetok


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, list[int] | None, list[int]]:
    """A tokenizer, a prompt (as engines send them, random ids, or none) and an output."""
    name = draw(st.sampled_from(TOKENIZERS))
    prompt = draw(st.one_of(st.none(), helpers.prompt_lists(name)))
    output = draw(helpers.output_lists(name).filter(bool))
    return name, prompt, output


@given(
    case=requests(),
    skip=st.booleans(),
    chat=st.booleans(),
    chunks=st.lists(st.integers(1, 4), min_size=1, max_size=3),
)
def test_a_streamed_derender_is_the_tokenizers_decode_after_the_prompt(
    case: tuple[str, list[int] | None, list[int]], skip: bool, chat: bool, chunks: list[int]
) -> None:
    """Chunk by chunk, the client carrying each ``stream_state`` to its next call: the joined text
    is ``decode(prompt + output)`` after ``decode(prompt)`` (contract C), and every state is one
    vLLM takes back (at most 1,024 strings)."""
    name, prompt, output = case
    got = stream(render_client(name), prompt, output, chunks, chat=chat, skip_special_tokens=skip)
    assert got.text == expected(name, prompt, output, skip)
    for state in got.states:
        assert len(DerenderStreamState.model_validate(state).prev_tokens) <= derender.WINDOW


@given(case=requests(), skip=st.booleans(), chat=st.booleans())
def test_a_whole_derender_is_the_tokenizers_decode_after_the_prompt(
    case: tuple[str, list[int] | None, list[int]], skip: bool, chat: bool
) -> None:
    """The non-streamed derender decodes the whole output to its end."""
    name, prompt, output = case
    assert whole(render_client(name), prompt, output, chat=chat, skip_special_tokens=skip) == expected(
        name, prompt, output, skip
    )


@pytest.mark.parametrize("name", ["qwen3", "llama2"])
@pytest.mark.parametrize("streamed", [True, False])
def test_a_stop_token_is_left_out(name: str, streamed: bool) -> None:
    """A request the model ended with its EOS (``finish_reason="stop"``): vLLM leaves that id's
    text out, and the rest is the exact text."""
    tok = helpers.tokenizer(name)
    prompt = tok.encode("Say it:")
    output = [*tok.encode(" one 🌶 two", add_special_tokens=False), tok.eos_token_id]
    client = render_client(name)
    text = (
        stream(client, prompt, output, (2,), finish="stop", skip_special_tokens=False).text
        if streamed
        else whole(client, prompt, output, finish="stop", skip_special_tokens=False)
    )
    assert text == expected(name, prompt, output[:-1], False)


@pytest.mark.parametrize("streamed", [True, False])
def test_a_prompt_ending_inside_a_character(streamed: bool, vllms_own: None) -> None:
    """The request docs/engines/vllm.md shows: the prompt ends inside "🌶". vLLM's own derender,
    streamed or whole, loses the character; with the plugin both are exact."""
    prompt, output = HOT_PEPPER
    client = render_client("qwen3")

    def run() -> str:
        return stream(client, prompt, output).text if streamed else whole(client, prompt, output)

    assert run() == " is spicy"  # vLLM's own
    plugin.register()
    assert run() == "🌶 is spicy" == expected("qwen3", prompt, output, True)


@pytest.mark.parametrize("name", ["qwen3", "llama2"])
@pytest.mark.parametrize("streamed", [True, False])
def test_a_request_ending_inside_a_character_ends_with_decodes_text(
    name: str, streamed: bool, vllms_own: None
) -> None:
    """The output ends inside a character: ``decode`` shows U+FFFD there, which vLLM's own
    derender never sends; with the plugin the last chunk flushes it."""
    tok = helpers.tokenizer(name)
    output = tok.encode("Hi 🌶", add_special_tokens=False)[:-1]
    client = render_client(name)

    def run() -> str:
        return stream(client, [], output).text if streamed else whole(client, [], output)

    theirs = run()
    plugin.register()
    assert run() == tok.decode(output) != theirs
    assert tok.decode(output).startswith(theirs) and tok.decode(output).endswith("\ufffd")


@pytest.mark.parametrize("parser", [False, True])
def test_a_last_chunk_without_ids(parser: bool, vllms_own: None) -> None:
    """The last chunk carries a ``finish_reason`` and no ids, the output before it ending inside a
    character. Without a parser the plugin flushes the text still held with that chunk. With a
    reasoning parser, vLLM hands the parser that chunk's text without decoding, so the held text
    is not sent: the documented limit, the text vLLM's own code sends too."""
    tok = helpers.tokenizer("qwen3")
    output = tok.encode("Hi 🌶", add_special_tokens=False)[:-1]
    client = render_client("qwen3", "--reasoning-parser", "qwen3") if parser else render_client("qwen3")

    def run() -> str:
        return stream(
            client, [1, 2, 3], output, chat=True, skip_special_tokens=not parser, finish_apart=True
        ).text

    theirs = run()
    plugin.register()
    assert theirs == "Hi" and tok.decode(output) == "Hi \ufffd"
    assert run() == ("Hi" if parser else "Hi \ufffd")


@pytest.mark.parametrize("name", ["qwen3", "llama2"])
@pytest.mark.parametrize("first", ["puredetok", "vLLM"])
def test_a_state_from_either_derender_continues_in_the_other(name: str, first: str) -> None:
    """Derender servers with and without the plugin can serve one stream between them: the state
    stays vLLM's (its strings, its read offset), so each continues from the other's (on text that
    vLLM's own code decodes exactly)."""
    tok = helpers.tokenizer(name)
    prompt = tok.encode("Question: hot?\nAnswer:")
    output = tok.encode(" Yes, 🌶 is hot. 推理 is hard.", add_special_tokens=False)
    client = render_client(name)
    cut = len(output) // 2
    if first == "vLLM":
        plugin.unregister()
    try:
        head = stream(client, prompt, output[:cut], finish="length")
    finally:
        plugin.register()
    if first == "puredetok":
        plugin.unregister()
    try:
        body = _stream_call(client, output[cut:], head.states[-1])
    finally:
        plugin.register()
    assert head.text + body["chunk"]["choices"][0]["text"] == expected(name, prompt, output, True)


def _stream_call(client: Any, ids: list[int], state: dict[str, Any] | None, finish: str = "length") -> Any:
    choice = {"index": 0, "token_ids": ids, "finish_reason": finish}
    answer = client.post(
        "/v1/completions/derender",
        json={
            "stream": True,
            "generate_chunk": {"request_id": "r", "choices": [choice]},
            "stream_state": state,
        },
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.mark.parametrize(
    ("state", "error"),
    [
        (
            {"prev_tokens": ["Hello", "not-a-token"], "read_offset": 2},
            "prev_tokens[1] 'not-a-token' is not a token",
        ),
        ({"prev_tokens": ["Hello"], "read_offset": 3}, "read_offset 3 is past prev_tokens (1)"),
    ],
)
def test_a_state_that_names_no_token_is_the_requests_error(state: dict[str, Any], error: str) -> None:
    """A ``stream_state`` the server could not have made (a string that is not a token of the
    model, a read offset past the strings) is answered with a 400 saying what is wrong; the
    server goes on, and the next request is answered."""
    client = render_client("qwen3")
    choice = {"index": 0, "token_ids": [9707], "finish_reason": None}
    answer = client.post(
        "/v1/completions/derender",
        json={
            "stream": True,
            "generate_chunk": {"request_id": "r", "choices": [choice]},
            "stream_state": state,
        },
    )
    assert answer.status_code == 400 and error in answer.text
    assert _stream_call(client, [9707], None)["chunk"]["choices"][0]["text"] == "Hello"


@pytest.mark.parametrize("streamed", [True, False])
def test_ids_past_the_vocabulary_decode_to_nothing(streamed: bool) -> None:
    """Ids past the tokenizer's vocabulary (a padded embedding table can sample them) decode to
    nothing, as ``tokenizer.decode`` skips them and vLLM's own state holds them as ``""``."""
    tok = helpers.tokenizer("qwen3")
    words = tok.encode(" one two", add_special_tokens=False)
    output = [words[0], len(tok) + 5, *words[1:], len(tok)]
    client = render_client("qwen3")
    text = stream(client, [9707], output).text if streamed else whole(client, [9707], output)
    assert text == " one two" == expected("qwen3", [9707], words, True)


def test_a_long_byte_run_keeps_the_state_within_vllms_bound() -> None:
    """Llama-2 spelling 300 characters in byte tokens (a byte run is held until it is decided):
    the state stays within vLLM's 1,024 strings (runs are held up to 512 tokens) and the text is
    exact, streamed 7 ids a call."""
    tok = helpers.tokenizer("llama2")
    byte = {i: tok.convert_tokens_to_ids(f"<0x{i:02X}>") for i in range(256)}
    output = [byte[b] for b in ("𝔄" * 300).encode()]
    got = stream(render_client("llama2"), tok.encode("Spell:"), output, (7,))
    assert got.text == expected("llama2", tok.encode("Spell:"), output, True) == "𝔄" * 300
    assert max(len(state["prev_tokens"]) for state in got.states) <= derender.WINDOW


@pytest.mark.parametrize(
    "text", ["plain answer 🌶 ok", "推理 and 🦩🦩", "Hi 🌶 there"], ids=["plain", "cjk", "split"]
)
@given(chunks=st.lists(st.integers(1, 3), min_size=1, max_size=3), cut=st.integers(0, 2))
def test_a_chat_with_a_reasoning_parser_gets_the_exact_text(text: str, chunks: list[int], cut: int) -> None:
    """With ``--reasoning-parser qwen3`` the chat derender replays the output to rebuild the
    parser at each chunk (``_derender_chat_stream_parsed``) and decodes a whole response with
    ``_decode_output``: reasoning and content joined are the exact text, its end flushed (the
    output cut inside a character)."""
    tok = helpers.tokenizer("qwen3")
    output = tok.encode(text, add_special_tokens=False)
    output = output[: len(output) - cut] or output
    client = render_client("qwen3", "--reasoning-parser", "qwen3")
    want = tok.decode(output, skip_special_tokens=False)
    assert stream(client, [1, 2, 3], output, chunks, chat=True, skip_special_tokens=False).text == want
    assert whole(client, [1, 2, 3], output, chat=True, skip_special_tokens=False) == want


def test_a_failure_of_the_plugin_leaves_the_call_to_vllms_own_code(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """If puredetok fails on a call (it should not), vLLM's own code decodes that call, and the
    failure is logged once; the request is answered."""
    tok = helpers.tokenizer("qwen3")
    output = tok.encode(" one two three", add_special_tokens=False)

    def failing(*args: Any) -> Any:
        raise RuntimeError("injected")

    monkeypatch.setattr(derender, "_continue", failing)
    monkeypatch.setattr(plugin, "_logged", set())
    with caplog.at_level("WARNING", logger="vllm.puredetok"):
        first = stream(render_client("qwen3"), [], output)
        stream(render_client("qwen3"), [], output)
    assert first.text == " one two three"
    assert sum("_detokenize_delta failed" in r.getMessage() for r in caplog.records) == 1


class _Twins:
    """A tokenizer whose two ids share one string."""

    def __len__(self) -> int:
        return 3

    def convert_ids_to_tokens(self, ids: list[int], skip_special_tokens: bool = False) -> list[str]:
        return [["a", "b", "a"][i] for i in ids]


def test_a_tokenizer_whose_strings_name_no_ids_is_left_to_vllms_own_code(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A state names tokens by their strings: where two ids share one, the plugin could not tell
    them apart, and leaves the tokenizer's requests to vLLM's own derender (logged once)."""
    monkeypatch.setattr(plugin, "_logged", set())
    with caplog.at_level("WARNING", logger="vllm.puredetok"):
        assert derender._vocabulary(_Twins(), True) is None
    [line] = [r.getMessage() for r in caplog.records]
    assert "do not name its ids (1 of its ids have no string of their own)" in line


def _changed(module: Any, change: str, mp: pytest.MonkeyPatch) -> None:
    online = module.OnlineDerenderer
    if change == "a method gone":
        mp.delattr(online, "_decode_output")
    elif change == "another signature":
        mp.setattr(online, "_detokenize_delta", lambda self, tokenizer, ids, state: None)
    elif change == "a field gone":

        class State(BaseModel):
            prev_tokens: list[str] = []
            prefix_offset: int = 0
            output_chunk_lens: list[int] = []

        mp.setattr(module, "DerenderStreamState", State)
    else:  # the patching fails half-way
        mp.setattr(derender, "_stream", lambda *args: 1 / 0)


@pytest.mark.parametrize("change", ["a method gone", "another signature", "a field gone", "patching fails"])
def test_a_derender_the_plugin_was_not_made_for_is_left_as_it_is(
    change: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On a vLLM whose derender differs from the one the plugin was made for (a method gone or
    called otherwise, a state without a field), or if hooking it fails half-way (undone), vLLM's
    own derender decodes, and the log says why."""
    render_client("qwen3")
    module = importlib.import_module(derender.MODULE)
    own = dict(vars(module.OnlineDerenderer))
    plugin.unregister()
    plain = dict(vars(module.OnlineDerenderer))
    try:
        with pytest.MonkeyPatch.context() as mp, caplog.at_level("WARNING", logger="vllm.puredetok"):
            _changed(module, change, mp)
            derender._patch(module)
            assert not derender.registered()
            if change == "patching fails":
                assert {n: vars(module.OnlineDerenderer)[n] for n in derender.METHODS} == {
                    n: plain[n] for n in derender.METHODS
                }
                assert not getattr(module._seed_stream_state, "puredetok", False)
        [warning] = [r.getMessage() for r in caplog.records if "derender not hooked" in r.getMessage()]
        reason = {
            "a method gone": "OnlineDerenderer has no method _decode_output",
            "another signature": "_detokenize_delta takes (tokenizer, ids, state)",
            "a field gone": "DerenderStreamState lacks read_offset",
            "patching fails": "ZeroDivisionError",
        }[change]
        assert reason in warning and "vLLM's own code decodes it" in warning
    finally:
        plugin.register()
    assert derender.registered() and own["_detokenize_delta"] is not plain["_detokenize_delta"]


def test_the_derender_is_hooked_when_vllm_imports_it_after_loading_its_plugins() -> None:
    """In a fresh process, vLLM loads its plugins before anything imports the derender module (so
    processes that never derender do not import it); the module is hooked when it is imported."""
    script = textwrap.dedent(
        f"""
        import sys
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        assert {derender.MODULE!r} not in sys.modules
        import puredetok.engines._vllm_derender as derender
        assert not derender.registered()
        from vllm.renderers.online_derenderer import OnlineDerenderer
        assert derender.registered() and OnlineDerenderer._detokenize_delta.puredetok
        print("hooked")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and done.stdout.strip().endswith("hooked"), done.stderr[-3000:]
