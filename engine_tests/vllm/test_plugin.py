"""puredetok inside vLLM's own ``OutputProcessor``: loaded through vLLM's entry point, exact text
after the prompt on every shared tokenizer, and vLLM's sampling parameters kept."""

from __future__ import annotations

import copy
import functools
import shutil
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vllm.sampling_params import RequestOutputKind
from vllm.tokenizers.hf import ThreadSafeHFTokenizerMixin, maybe_make_thread_pool
from vllm.v1.engine.detokenizer import IncrementalDetokenizer
from vllm.v1.engine.output_processor import OutputProcessor

import helpers
import puredetok.engines.vllm as plugin
from driver import KINDS, detokenizer_of, request, run, vllm_tokenizer
from puredetok._core import continuation_text
from puredetok.serving._codec_cache import CodecOptions

TOKENIZERS = ("qwen3", "llama2", "mistral_v03", "t5_small", "gpt2", "phi3_mini")
"""Byte-level BPE (Qwen3, GPT-2), SentencePiece with byte fallback (Llama-2, Mistral v0.3,
Phi-3) and Unigram with cleanup (T5)."""


def expected(name: str, prompt: list[int] | None, output: list[int], skip: bool, spaces: bool = True) -> str:
    """Contract C from the tokenizer's own decode: ``decode(p + s)`` after what ``decode(p)`` showed."""
    tok = helpers.tokenizer(name)

    def decode(ids: list[int]) -> str:
        return str(tok.decode(ids, skip_special_tokens=skip, spaces_between_special_tokens=spaces))

    return continuation_text(decode(prompt or []), decode([*(prompt or []), *output]))


def earliest_stop(text: str, stops: list[str]) -> tuple[int, int, str] | None:
    """``(end, start, stop)`` of the stop string occurrence that ends first (of those ending at the
    same place, the longer)."""
    hits = [(text.find(s) + len(s), text.find(s), s) for s in stops if s in text]
    best: tuple[int, int, str] | None = None
    for stop in stops:
        for begin in range(len(text) - len(stop) + 1):
            if text.startswith(stop, begin) and (best is None or (begin + len(stop), begin) < best[:2]):
                best = (begin + len(stop), begin, stop)
    assert (best is None) == (not hits)
    return best


def test_vllm_loads_the_plugin_through_its_entry_point() -> None:
    """``load_general_plugins`` (run by the driver's import, as vLLM runs it) registered us, and
    vLLM's own ``from_new_request`` now hands out puredetok's detokenizer, a subclass of vLLM's."""
    assert plugin.registered()
    detokenizer = IncrementalDetokenizer.from_new_request(vllm_tokenizer("qwen3"), request([9707]))
    assert isinstance(detokenizer, plugin.PuredetokDetokenizer)
    assert isinstance(detokenizer, IncrementalDetokenizer)
    processor = OutputProcessor(vllm_tokenizer("qwen3"), log_stats=False)
    processor.add_request(request([9707], request_id="x"), None)
    assert isinstance(detokenizer_of(processor, "x"), plugin.PuredetokDetokenizer)


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
    spaces=st.booleans(),
    kind=st.sampled_from(KINDS),
    chunks=st.lists(st.integers(1, 4), min_size=1, max_size=3),
)
def test_the_text_is_the_tokenizers_decode_after_the_prompt(
    case: tuple[str, list[int] | None, list[int]],
    skip: bool,
    spaces: bool,
    kind: RequestOutputKind,
    chunks: list[int],
) -> None:
    """Every request's text is ``decode(prompt + output)`` after what ``decode(prompt)`` showed,
    whatever the output kind and the batching; every delta is final (the text only grows) and the
    ids are the output's."""
    name, prompt, output = case
    result = run(
        vllm_tokenizer(name),
        [] if prompt is None else prompt,
        output,
        chunks=chunks,
        skip_special_tokens=skip,
        spaces_between_special_tokens=spaces,
        output_kind=kind,
    )
    want = expected(name, prompt, output, skip, spaces)
    assert result.text == want
    assert result.token_ids == output
    assert result.finished and result.finish_reason == "length"
    if kind == RequestOutputKind.FINAL_ONLY:
        assert len(result.outputs) == 1
    shown = ""
    for out in result.outputs:
        shown = shown + out.text if kind == RequestOutputKind.DELTA else out.text
        assert want.startswith(shown)


@functools.cache
def pooled_tokenizer(name: str) -> Any:
    """The tokenizer as ``LLM`` and ``AsyncLLM`` hand it to their ``OutputProcessor``: a copy of
    vLLM's, made thread safe by ``maybe_make_thread_pool`` as vLLM's renderer does (in place: its
    class becomes a ``TokenizerPool`` subclass whose ``decode`` calls a deep copy)."""
    tokenizer = copy.copy(vllm_tokenizer(name))
    maybe_make_thread_pool(tokenizer, 2)
    return tokenizer


@given(
    case=requests(),
    skip=st.booleans(),
    spaces=st.booleans(),
    chunks=st.lists(st.integers(1, 4), min_size=1, max_size=3),
)
def test_the_thread_pool_tokenizer_gets_puredetok_and_its_text_is_decodes(
    case: tuple[str, list[int] | None, list[int]],
    skip: bool,
    spaces: bool,
    chunks: list[int],
) -> None:
    """Over the thread-pool tokenizer the front ends hand the ``OutputProcessor``: every request
    gets puredetok's detokenizer (its codec built from the pool's own class, not refused for the
    pool's ``decode``), and its text is the tokenizer's decode after the prompt, as over the plain
    tokenizer."""
    name, prompt, output = case
    tokenizer = pooled_tokenizer(name)
    assert isinstance(tokenizer, ThreadSafeHFTokenizerMixin)
    assert plugin.codec_of(tokenizer, skip, spaces) is not None
    processor = OutputProcessor(tokenizer, log_stats=False)
    processor.add_request(request(prompt or [], request_id="pooled"), None)
    assert isinstance(detokenizer_of(processor, "pooled"), plugin.PuredetokDetokenizer)
    result = run(
        tokenizer,
        prompt,
        output,
        chunks=chunks,
        skip_special_tokens=skip,
        spaces_between_special_tokens=spaces,
    )
    assert result.text == expected(name, prompt, output, skip, spaces)
    assert result.token_ids == output and result.finish_reason == "length"


@given(
    case=requests(),
    data=st.data(),
    include=st.booleans(),
    kind=st.sampled_from(KINDS),
    chunks=st.lists(st.integers(1, 3), min_size=1, max_size=3),
)
def test_stop_strings_end_the_text_where_the_tokenizers_decode_shows_them(
    case: tuple[str, list[int] | None, list[int]],
    data: st.DataObject,
    include: bool,
    kind: RequestOutputKind,
    chunks: list[int],
) -> None:
    """Stop strings (pieces of the text, and strings that may not occur) cut the text before the
    first one to complete (``include_stop_str_in_output``: after it), with ``finish_reason="stop"``
    and the string as ``stop_reason``; without a match the request ends on its length."""
    name, prompt, output = case
    full = expected(name, prompt, output, skip=True)
    pieces = st.builds(lambda i, n: full[i : i + n], st.integers(0, max(len(full) - 1, 0)), st.integers(1, 6))
    stops = data.draw(
        st.lists(st.one_of(pieces, st.text(min_size=1, max_size=4)).filter(bool), min_size=1, max_size=4)
    )
    result = run(
        vllm_tokenizer(name),
        prompt,
        output,
        chunks=chunks,
        stop=stops,
        include_stop_str_in_output=include,
        output_kind=kind,
    )
    hit = earliest_stop(full, stops)
    if hit is None:
        assert (result.text, result.finish_reason, result.stop_reason) == (full, "length", None)
        return
    end, begin, stop = hit
    assert result.text == full[: end if include else begin]
    assert (result.finish_reason, result.stop_reason) == ("stop", stop)
    kept = result.token_ids
    assert kept == output[: len(kept)] and kept
    assert stop in expected(name, prompt, kept, skip=True)


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("skip", [False, True])
def test_a_stop_id_from_the_engine_core_adds_its_text_only_when_included(
    name: str, include: bool, skip: bool
) -> None:
    """The engine core ends a request on a stop id or EOS (``finish_reason="stop"``, the id as
    ``stop_reason``): its text is left out unless ``include_stop_str_in_output``."""
    tok = helpers.tokenizer(name)
    eos = tok.eos_token_id
    body = tok.encode("Fine, 谢谢 😀!", add_special_tokens=False)
    prompt = tok.encode("How are you?")
    result = run(
        vllm_tokenizer(name),
        prompt,
        [*body, eos],
        stop_id=True,
        skip_special_tokens=skip,
        include_stop_str_in_output=include,
    )
    assert result.text == expected(name, prompt, [*body, eos] if include else body, skip)
    assert (result.finish_reason, result.stop_reason) == ("stop", eos)
    assert result.token_ids == [*body, eos]


@pytest.mark.parametrize("kind", KINDS)
def test_min_tokens_keeps_stop_strings_from_ending_the_first_tokens(kind: RequestOutputKind) -> None:
    """A stop string is not looked for in the text of the first ``min_tokens`` tokens, but one that
    starts there and ends after counts (vLLM's rule)."""
    tok = vllm_tokenizer("qwen3")
    output = tok.encode("stop now stop", add_special_tokens=False)
    assert len(output) == 3
    first = run(tok, [], output, stop=["stop"], min_tokens=1, output_kind=kind)
    assert (first.text, first.stop_reason) == ("stop now ", "stop")
    spanning = run(tok, [], output, stop=["now st"], min_tokens=2, output_kind=kind)
    assert (spanning.text, spanning.stop_reason) == ("stop ", "now st")
    late = run(tok, [], output, stop=["stop"], min_tokens=3, output_kind=kind)
    assert (late.text, late.finish_reason) == ("stop now stop", "length")


def test_parallel_sampling_gives_each_sample_its_own_exact_text() -> None:
    """``n > 1``: each child request gets its own detokenizer and its own exact text."""
    from vllm.v1.engine import EngineCoreOutput, FinishReason
    from vllm.v1.engine.parallel_sampling import ParentRequest

    tok = vllm_tokenizer("llama2")
    prompt = tok.encode("Tell me:\n")
    outputs = [tok.encode(text, add_special_tokens=False) for text in ("鱻䨻🦩 ok", "┌──┐ naïve", "Done.")]
    processor = OutputProcessor(tok, log_stats=False)
    parent_request = request(prompt, n=3, output_kind=RequestOutputKind.FINAL_ONLY)
    parent = ParentRequest(parent_request)
    children = []
    for index in range(3):
        child_id, params = parent.get_child_info(index)
        child = request(prompt, request_id=child_id)
        child.sampling_params = params
        processor.add_request(child, None, parent, index)
        children.append(child_id)
    got = []
    for step in range(max(map(len, outputs))):
        batch = [
            EngineCoreOutput(
                request_id=child,
                new_token_ids=[ids[step]],
                finish_reason=FinishReason.LENGTH if step == len(ids) - 1 else None,
            )
            for child, ids in zip(children, outputs)
            if step < len(ids)
        ]
        got += processor.process_outputs(batch).request_outputs
    [final] = got
    texts = [o.text for o in sorted(final.outputs, key=lambda o: o.index)]
    assert texts == [expected("llama2", prompt, ids, True) for ids in outputs]


def test_detokenize_false_sends_ids_and_no_text() -> None:
    """``detokenize=False`` keeps vLLM's behaviour: no detokenizer work, the ids only."""
    tok = vllm_tokenizer("qwen3")
    output = tok.encode("no text please", add_special_tokens=False)
    result = run(tok, [1, 2], output, detokenize=False)
    assert result.text == "" and result.token_ids == output


@pytest.mark.parametrize("name", ["qwen3", "llama2", "t5_small"])
def test_ids_past_the_vocabulary_decode_to_nothing(name: str) -> None:
    """Ids a padded embedding table can sample past the tokenizer's vocabulary decode to nothing,
    as ``tokenizer.decode`` skips them (and vLLM's own detokenizer drops them); the ids are kept."""
    tok = vllm_tokenizer(name)
    size = len(helpers.tokenizer(name))
    body = tok.encode("a b 😀 c", add_special_tokens=False)
    output = [body[0], size, *body[1:3], size + 1000, *body[3:]]
    result = run(tok, [], output)
    assert result.text == expected(name, [], body, True)
    assert result.token_ids == output


def test_an_abort_sends_the_text_held_for_stop_strings() -> None:
    """An abort ends the request with what vLLM would send: the text held back because it could
    start a stop string is sent with the final output."""
    tok = vllm_tokenizer("qwen3")
    processor = OutputProcessor(tok, log_stats=False)
    req = request([], stop=["<|stop|>"], output_kind=RequestOutputKind.DELTA)
    processor.add_request(req, None)
    from vllm.v1.engine import EngineCoreOutput

    texts = []
    for token_id in tok.encode("answer <|st", add_special_tokens=False):
        for out in processor.process_outputs([EngineCoreOutput(req.request_id, [token_id])]).request_outputs:
            texts.append(out.outputs[0].text)
    assert "".join(texts) == "answer "
    from vllm.v1.engine.output_processor import RequestOutputCollector

    state = processor.request_states[req.request_id]
    state.queue = RequestOutputCollector(RequestOutputKind.DELTA, req.request_id)
    processor.abort_requests([req.request_id], internal=True)
    final = state.queue.get_nowait()
    assert final is not None and final.outputs[0].text == "<|st" and final.outputs[0].finish_reason == "abort"


def test_a_resumable_request_continues_after_each_input_chunk() -> None:
    """Streaming input (``resumable``): each chunk's output is the exact continuation of the whole
    context so far (every prompt chunk and every output before it)."""
    from vllm.v1.engine import EngineCoreOutput, FinishReason

    tok = vllm_tokenizer("llama2")
    processor = OutputProcessor(tok, log_stats=False)
    first_prompt = tok.encode("Q1:\n")
    req = request(first_prompt, request_id="s", output_kind=RequestOutputKind.DELTA)
    req.resumable = True
    processor.add_request(req, None)
    out1 = tok.encode("A 😀", add_special_tokens=False)
    second_prompt = tok.encode("\nQ2:", add_special_tokens=False)
    out2 = tok.encode(" B ┌┐", add_special_tokens=False)
    text1 = text2 = ""
    for i, token_id in enumerate(out1):
        reason = FinishReason.LENGTH if i == len(out1) - 1 else None
        for o in processor.process_outputs(
            [EngineCoreOutput("s", [token_id], finish_reason=reason)]
        ).request_outputs:
            text1 += o.outputs[0].text
    nxt = request(second_prompt, request_id="s")
    nxt.resumable = True
    processor.add_request(nxt, None)
    for i, token_id in enumerate(out2):
        reason = FinishReason.LENGTH if i == len(out2) - 1 else None
        for o in processor.process_outputs(
            [EngineCoreOutput("s", [token_id], finish_reason=reason)]
        ).request_outputs:
            text2 += o.outputs[0].text
    assert text1 == expected("llama2", first_prompt, out1, True)
    assert text2 == expected("llama2", [*first_prompt, *out1, *second_prompt], out2, True)


def _changed_vllm(change: str, mp: pytest.MonkeyPatch) -> None:
    """vLLM's classes as another vLLM version could have them."""
    if change == "a new member":
        mp.setattr(IncrementalDetokenizer, "reset", lambda self: None, raising=False)
    elif change == "a member gone":
        mp.delattr(IncrementalDetokenizer, "num_output_tokens")
    elif change == "another signature":

        def from_new_request(cls: Any, tokenizer: Any, request: Any, cache: Any = None) -> Any:
            raise AssertionError("not called")

        mp.setattr(IncrementalDetokenizer, "from_new_request", classmethod(from_new_request))
    elif change == "a module moved":
        mp.setitem(sys.modules, "vllm.v1.engine.detokenizer", None)
    elif change == "no __init__ of its own":
        mp.delattr(OutputProcessor, "__init__")
    else:  # the patching itself fails half-way
        mp.setattr(plugin, "_hook_output_processor", lambda: 1 / 0)


@pytest.mark.parametrize(
    "change",
    [
        "a new member",
        "a member gone",
        "another signature",
        "a module moved",
        "no __init__ of its own",
        "patching fails",
    ],
)
def test_a_vllm_the_plugin_was_not_made_for_keeps_its_own_detokenizer(
    change: str, caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM calls its general plugins unguarded, so a ``register`` that raised would stop vLLM.
    On a vLLM whose classes differ from the ones the plugin was made for, it leaves vLLM as it is
    and says why, once; a patch that fails half-way is undone."""
    own = IncrementalDetokenizer.__dict__["from_new_request"]
    plugin.unregister()
    plain = IncrementalDetokenizer.__dict__["from_new_request"]
    try:
        with pytest.MonkeyPatch.context() as mp, caplog.at_level("WARNING", logger="vllm.puredetok"):
            _changed_vllm(change, mp)
            plugin.register()  # does not raise
            assert not plugin.registered()
            if change == "patching fails":
                assert IncrementalDetokenizer.__dict__["from_new_request"] is plain
        [warning] = [r.getMessage() for r in caplog.records if "not used with this vLLM" in r.getMessage()]
        assert f"vllm {version('vllm')}" in warning and "vLLM's own detokenizer decodes" in warning
        reason = {
            "a new member": "has reset",
            "a member gone": "lacks num_output_tokens",
            "another signature": "takes (tokenizer, request, cache)",
            "a module moved": "ModuleNotFoundError",
            "no __init__ of its own": "OutputProcessor has no __init__",
            "patching fails": "ZeroDivisionError",
        }[change]
        assert reason in warning
        detokenizer = IncrementalDetokenizer.from_new_request(vllm_tokenizer("qwen3"), request([9707]))
        assert not isinstance(detokenizer, plugin.PuredetokDetokenizer)
    finally:
        plugin.register()
    assert plugin.registered() and IncrementalDetokenizer.__dict__["from_new_request"] is not plain
    assert own is not plain


@pytest.mark.parametrize("where", ["advance", "close"])
@pytest.mark.parametrize("kind", [RequestOutputKind.DELTA, RequestOutputKind.CUMULATIVE])
@pytest.mark.parametrize("chunk", [1, 3])
@pytest.mark.parametrize("stop_id", [False, True])
def test_a_failure_mid_request_goes_on_with_vllms_own_detokenizer(
    where: str,
    kind: RequestOutputKind,
    chunk: int,
    stop_id: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If puredetok fails in the middle of a request (a step, or the flush when the engine ends
    it), the request goes on with vLLM's own detokenizer from where it was, and the failure is
    logged once. No text is sent twice and none is lost, also when the failure comes in the middle
    of a batch of ids (speculative decoding), after some of the batch was decoded."""
    tok = vllm_tokenizer("qwen3")
    output = tok.encode("one two three four five six", add_special_tokens=False)
    if stop_id:
        output.append(tok.eos_token_id)
    real = getattr(plugin, where)

    def failing(*args: Any) -> Any:
        if where == "close" or args[1] == output[4]:
            raise RuntimeError("injected")
        return real(*args)

    monkeypatch.setattr(plugin, where, failing)
    monkeypatch.setattr(plugin, "_logged", set())
    with caplog.at_level("WARNING", logger="vllm.puredetok"):
        result = run(tok, [], output, chunks=[chunk], stop_id=stop_id, stop=["seven"], output_kind=kind)
        run(tok, [], output, chunks=[chunk], stop_id=stop_id, stop=["seven"])  # not logged again
    assert result.text == "one two three four five six"
    assert result.token_ids == output
    assert sum("failed" in r.getMessage() for r in caplog.records) == 1


def test_a_tokenizer_puredetok_does_not_model_exactly_gets_vllms_own(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A tokenizer class that overrides ``decode`` is not modelled exactly (``codec_for`` gives
    its generic fallback): its requests get vLLM's own detokenizer, the text is vLLM's, and the
    reason is logged once."""
    from transformers import PreTrainedTokenizerFast

    class OverridingDecode(PreTrainedTokenizerFast):  # type: ignore[misc]
        def decode(self, *args: Any, **kwargs: Any) -> Any:
            return PreTrainedTokenizerFast.decode(self, *args, **kwargs)

    backend = helpers.tokenizer("qwen3").backend_tokenizer
    tok = OverridingDecode(tokenizer_object=backend.from_str(backend.to_str()))
    output = tok.encode("Bonjour 😀 !", add_special_tokens=False)
    monkeypatch.setattr(plugin, "_logged", set())
    with caplog.at_level("WARNING", logger="vllm.puredetok"):
        processor = OutputProcessor(tok, log_stats=False)
        processor.add_request(request([9707], request_id="o"), None)
        assert not isinstance(detokenizer_of(processor, "o"), plugin.PuredetokDetokenizer)
        result = run(tok, [9707], output)
    assert result.text == _own(tok, [9707], output) == "Bonjour 😀 !"
    assert sum("not modelled exactly" in r.getMessage() for r in caplog.records) == 1


MISTRAL_FILES = {
    "tekken": ("tekken_240911.json", "tekken.json"),
    "sentencepiece": ("mistral_instruct_tokenizer_240323.model.v3", "tokenizer.model.v3"),
}
"""mistral-common's own tokenizer files (shipped in its package), as a model folder holds them."""


@functools.cache
def mistral_tokenizer(kind: str) -> Any:
    """vLLM's ``MistralTokenizer`` (``tokenizer_mode="mistral"``) over one of mistral-common's files."""
    import mistral_common
    from vllm.tokenizers.registry import get_tokenizer

    source, name = MISTRAL_FILES[kind]
    folder = Path(tempfile.mkdtemp(prefix=f"puredetok-vllm-mistral-{kind}-"))
    shutil.copy(Path(mistral_common.__file__).parent / "data" / source, folder / name)
    return get_tokenizer(str(folder), tokenizer_mode="mistral")


@pytest.mark.parametrize("kind", sorted(MISTRAL_FILES))
@given(data=st.data(), skip=st.booleans(), chunks=st.lists(st.integers(1, 3), min_size=1, max_size=2))
def test_vllms_mistral_tokenizer_gets_the_exact_text(
    kind: str, data: st.DataObject, skip: bool, chunks: list[int]
) -> None:
    """vLLM's Mistral tokenizer (``tokenizer_mode="mistral"``: mistral-common's Tekken, and its
    SentencePiece v3): puredetok's detokenizer, and the text is contract C's from its own decode
    (random ids over the whole vocabulary and multi-script text, after a prompt or none)."""
    tok = mistral_tokenizer(kind)
    size = tok.vocab_size

    def ids_of(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False))

    texts = st.sampled_from(["Bonjour 😀 鱻䨻 !", " 안녕하세요 🏳️‍🌈", "naïve café\n第二行", " ┌──┐ ok."])
    pieces = st.one_of(st.lists(st.integers(0, size - 1), max_size=12), texts.map(ids_of))
    prompt = data.draw(st.one_of(st.just([]), pieces))
    output = data.draw(pieces.filter(bool))
    processor = OutputProcessor(tok, log_stats=False)
    processor.add_request(request(prompt, request_id="m", skip_special_tokens=skip), None)
    assert isinstance(detokenizer_of(processor, "m"), plugin.PuredetokDetokenizer)
    result = run(tok, prompt, output, chunks=chunks, skip_special_tokens=skip)

    def decode(ids: list[int]) -> str:
        return str(tok.decode(ids, skip_special_tokens=skip))

    assert result.text == continuation_text(decode(prompt), decode([*prompt, *output]))
    assert result.token_ids == output


def _own(tok: Any, prompt: list[int], output: list[int], **params: Any) -> str:
    from driver import own_detokenizer

    with own_detokenizer():
        return run(tok, prompt, output, **params).text


@pytest.mark.parametrize(
    ("name", "cut", "vllm_text"),
    [("qwen3", 3, "Hello world 🌶 is spicy"), ("llama2", 4, "Hello 🌶 is spicy")],
)
def test_a_prompt_ending_inside_a_character(name: str, cut: int, vllm_text: str) -> None:
    """The request docs/engines/vllm.md shows: a prompt that ends inside a character (here the
    first byte tokens of "🌶", as when a reply cut by ``max_tokens`` is sent back as the next prompt
    or a client sends token ids). vLLM 0.33.0's own detokenizer sends the prompt's text again;
    with puredetok the output continues the prompt (contract C)."""
    tok = vllm_tokenizer(name)
    full = tok.encode("Hello world 🌶 is spicy" if name == "qwen3" else "Hello 🌶 is spicy")
    prompt, output = full[:cut], full[cut:]
    assert "\ufffd" in tok.decode(prompt)
    assert run(tok, prompt, output).text == "🌶 is spicy" == expected(name, prompt, output, True)
    assert _own(tok, prompt, output) == vllm_text


def test_ties_between_stop_strings_go_to_the_longest() -> None:
    """Stop strings ending at the same character: puredetok cuts at the one starting first, vLLM's
    own takes the first of the list (a documented difference)."""
    tok = vllm_tokenizer("qwen3")
    output = tok.encode("xab yz", add_special_tokens=False)
    ours = run(tok, [], output, stop=["b", "ab"])
    assert (ours.text, ours.stop_reason) == ("x", "ab")
    assert _own(tok, [], output, stop=["b", "ab"]) == "xa"


def test_only_what_could_start_a_stop_string_is_held() -> None:
    """Deltas come as soon as they cannot start a stop string; vLLM's own holds back the last
    ``max(len(stop)) - 1`` characters until the end (the whole text is the same)."""
    tok = vllm_tokenizer("qwen3")
    output = tok.encode("Hello there, friend", add_special_tokens=False)
    ours = run(tok, [], output, stop=["</answer>"])
    assert ours.outputs[0].text == "Hello"
    assert ours.text == "Hello there, friend"
    from driver import own_detokenizer

    with own_detokenizer():
        theirs = run(tok, [], output, stop=["</answer>"])
    assert theirs.outputs[0].text == "" and theirs.text == "Hello there, friend"


def test_the_final_flush_is_searched_for_stop_strings() -> None:
    """When the engine ends a request inside a character, the flushed U+FFFD is searched too: a
    stop string it completes cuts the text, and is the stop reason when the request ends on its
    ``max_tokens`` (or a stop id); when the engine ends it otherwise (here: before ``max_tokens``,
    as at the model's context limit) the finish reason stays the engine's, and the text is the
    exact text of all the ids, as a request that ended on its length has (what the audit checks)."""
    tok = vllm_tokenizer("qwen3")
    output = [*tok.encode(" ok", add_special_tokens=False), 11162]  # " " + the first byte of "🌶"
    assert tok.decode(output) == " ok \ufffd"
    at_max = run(tok, [], output, stop=["\ufffd"])
    assert (at_max.text, at_max.finish_reason, at_max.stop_reason) == (" ok ", "stop", "\ufffd")
    on_stop_id = run(tok, [], [*output, 151645], stop=["\ufffd"], stop_id=True)
    assert (on_stop_id.text, on_stop_id.finish_reason, on_stop_id.stop_reason) == (" ok ", "stop", "\ufffd")
    cut_short = run(tok, [], output, stop=["\ufffd"], max_tokens=100)
    assert (cut_short.text, cut_short.finish_reason, cut_short.stop_reason) == (" ok \ufffd", "length", None)


@pytest.mark.parametrize("kind", KINDS)
def test_a_stop_string_only_the_end_of_a_byte_run_completes(kind: RequestOutputKind) -> None:
    """Llama-2's newline is the byte token ``<0x0A>``: a run held until the next id shows it
    valid. A stop string ending in it is reported when the request ends on its ``max_tokens``;
    ended earlier by the engine (the context limit), the request's text is all of its ids'."""
    tok = vllm_tokenizer("llama2")
    output = [285, 30369, 13]
    assert tok.decode(output) == "f\u30bf\n" and helpers.byte_ids("llama2")[0x0A] == 13
    at_max = run(tok, [], output, stop=["\u30bf\n"], output_kind=kind)
    assert (at_max.text, at_max.finish_reason, at_max.stop_reason) == ("f", "stop", "\u30bf\n")
    cut_short = run(tok, [], output, stop=["\u30bf\n"], max_tokens=7, output_kind=kind)
    assert (cut_short.text, cut_short.finish_reason, cut_short.stop_reason) == ("f\u30bf\n", "length", None)


@pytest.mark.parametrize("kind", KINDS)
def test_a_stop_string_before_a_held_byte_ends_the_text_there(kind: RequestOutputKind) -> None:
    """Qwen3's ``"Ġå"`` is a space and the first byte of a character: a stop string ``" "`` ends
    the text before it, and the held byte is never sent, whatever ends the request after."""
    tok = vllm_tokenizer("qwen3")
    output = [4983, 196, 4891, 60998]
    assert tok.decode(output[:3]) == "acters\x08 \ufffd"
    for max_tokens in (len(output), 12):
        ours = run(tok, [], output, stop=[" "], max_tokens=max_tokens, output_kind=kind)
        assert (ours.text, ours.finish_reason, ours.stop_reason) == ("acters\x08", "stop", " ")


def test_a_stop_string_the_stop_ids_flush_completes_drops_the_stop_id() -> None:
    """A stop id (never decoded) ends a byte run that completes a stop string: the stop string is
    the reason and, as in vLLM's own, the ids end with the last decoded one, so that a log's ids
    decode to the text before the stop string (what the audit reads)."""
    tok = vllm_tokenizer("llama2")
    output = [285, 30369, 13, 2]
    ours = run(tok, [], output, stop=["\u30bf\n"], stop_id=True)
    assert (ours.text, ours.finish_reason, ours.stop_reason) == ("f", "stop", "\u30bf\n")
    assert ours.token_ids == output[:-1]
    from driver import own_detokenizer

    with own_detokenizer():
        theirs = run(tok, [], output, stop=["\u30bf\n"], stop_id=True)
    assert (theirs.text, theirs.stop_reason) == (ours.text, ours.stop_reason)
    assert theirs.token_ids == ours.token_ids


def test_a_request_with_prompt_embeds_gets_vllms_own() -> None:
    """A prompt given as embeddings has no ids to continue after: vLLM's own detokenizer."""
    import torch

    tok = vllm_tokenizer("qwen3")
    req = request([], request_id="e")
    req.prompt_token_ids = None
    req.prompt_embeds = torch.zeros(3, 8)
    detokenizer = IncrementalDetokenizer.from_new_request(tok, req)
    assert not isinstance(detokenizer, plugin.PuredetokDetokenizer)
    assert isinstance(detokenizer, IncrementalDetokenizer)


@pytest.mark.parametrize("name", ["llama2", "mistral_v03"])
def test_a_request_ending_inside_a_character_ends_with_decodes_text(name: str) -> None:
    """A request the engine ends (``max_tokens``) after the first byte tokens of a character: the
    text ends as ``decode`` shows it, with U+FFFD; vLLM's own drops those bytes."""
    tok = vllm_tokenizer(name)
    byte = helpers.byte_ids(name)
    output = [*tok.encode("ok", add_special_tokens=False), byte[0xF0], byte[0x9F]]
    want = expected(name, [1], output, True)
    assert want.endswith("\ufffd")
    assert run(tok, [1], output).text == want
    assert _own(tok, [1], output) == want.rstrip("\ufffd")


def test_ids_that_are_not_ids_decode_to_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """A negative id or one past ``2**32`` (which no sampler should give) decodes to nothing, is
    kept among the ids, and is logged once."""
    tok = vllm_tokenizer("qwen3")
    body = tok.encode("fine 😀", add_special_tokens=False)
    output = [body[0], -1, *body[1:], 1 << 40]
    plugin._logged.discard("invalid id")
    with caplog.at_level("WARNING", logger="vllm.puredetok"):
        result = run(tok, [], output)
    assert result.text == "fine 😀" and result.token_ids == output
    assert sum("decodes to nothing" in r.getMessage() for r in caplog.records) == 1


def test_ids_past_a_mistral_vocabulary_decode_to_nothing() -> None:
    """vLLM's Mistral tokenizer's ``decode`` raises on an id past its vocabulary; with puredetok
    such an id decodes to nothing (the request goes on) and is kept among the ids."""
    tok = mistral_tokenizer("tekken")
    body = tok.encode("Bonjour 😀", add_special_tokens=False)
    output = [body[0], tok.vocab_size + 5, *body[1:]]
    result = run(tok, [], output)
    assert result.text == tok.decode(body, skip_special_tokens=True)
    assert result.token_ids == output


def test_an_output_processor_builds_the_common_codecs_before_any_request() -> None:
    """When vLLM makes an ``OutputProcessor`` (as it starts), the codecs of its tokenizer for
    vLLM's default options and for ``skip_special_tokens=False`` are built in a thread of their
    own, so the first requests do not wait for them; a request then finds its codec built."""
    import time

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(helpers._folder("llama2")))  # a new object: nothing built

    def built() -> bool:
        return all(
            plugin._CODECS.ready(tok, CodecOptions(skip, None, spaces, None, "ignore"))
            for skip, spaces in plugin._WARM_OPTIONS
        )

    assert not built()
    OutputProcessor(tok, log_stats=False)
    waited = 0.0
    while not built():
        assert waited < 600, "the warm-up thread did not finish"
        time.sleep(0.05)
        waited += 0.05
    for skip, spaces in plugin._WARM_OPTIONS:
        assert plugin.codec_of(tok, skip, spaces) is not None
    processor = OutputProcessor(tok, log_stats=False)
    processor.add_request(request([1, 15043], request_id="w", skip_special_tokens=False), None)
    assert isinstance(detokenizer_of(processor, "w"), plugin.PuredetokDetokenizer)


@given(
    pieces=st.lists(
        st.sampled_from(["ab", "abc", " b", "c", "a", " stop", "<", "/", ">", "\n", "bca"]),
        min_size=1,
        max_size=10,
    ),
    stops=st.lists(
        st.sampled_from(["ab", "b", "abc", "bc", "ca", " stop", "</", ">\n", "c a"]),
        min_size=1,
        max_size=3,
        unique=True,
    ),
    min_tokens=st.integers(0, 6),
    include=st.booleans(),
    chunk=st.integers(1, 4),
    kind=st.sampled_from(KINDS),
    stop_id=st.booleans(),
)
def test_stop_parameters_end_a_request_as_vllms_own_detokenizer_does(
    pieces: list[str],
    stops: list[str],
    min_tokens: int,
    include: bool,
    chunk: int,
    kind: RequestOutputKind,
    stop_id: bool,
) -> None:
    """On plain text, where vLLM's own detokenizer is exact, the two end every request alike:
    stop strings that overlap, are prefixes of each other or span ids, ``min_tokens`` (also when
    a stop string appears before it is reached), ``include_stop_str_in_output``, a stop id from
    the engine core, several ids per step, every output kind: the same text, ids, finish reason
    and stop reason, but for stop strings ending at the same character (the documented tie)."""
    tok = vllm_tokenizer("qwen3")
    output = tok.encode("".join(pieces), add_special_tokens=False)
    if stop_id:
        output.append(tok.eos_token_id)
    min_tokens = min(min_tokens, len(output))
    params: dict[str, Any] = {
        "stop": stops,
        "min_tokens": min_tokens,
        "include_stop_str_in_output": include,
        "output_kind": kind,
    }
    ours = run(tok, [], output, chunks=[chunk], stop_id=stop_id, **params)
    from driver import own_detokenizer

    with own_detokenizer():
        theirs = run(tok, [], output, chunks=[chunk], stop_id=stop_id, **params)
    assert (ours.token_ids, ours.finish_reason) == (theirs.token_ids, theirs.finish_reason)
    if ours.stop_reason == theirs.stop_reason:
        assert ours.text == theirs.text
    else:  # a tie: both end at the same character, puredetok takes the longer
        assert isinstance(ours.stop_reason, str) and isinstance(theirs.stop_reason, str)
        assert len(ours.stop_reason) > len(theirs.stop_reason)
        assert ours.stop_reason.endswith(theirs.stop_reason)
