"""vLLM's own detokenizer and output-processor test cases, re-expressed against its real
``OutputProcessor`` with puredetok plugged in (written here from what those tests check:
vLLM's tests/v1/engine/test_output_processor.py, test_detokenizer.py,
test_detokenizer_stop_string_sync.py, tests/detokenizer/). Their tokenizers are Llama-3.2's and
Mistral v0.3's; the Llama-3 and Mistral v0.3 files in tests/data stand in for them."""

from __future__ import annotations

import pytest
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine import EngineCoreOutput, FinishReason
from vllm.v1.engine.output_processor import OutputProcessor

import helpers
from driver import request, run, vllm_tokenizer

FULL_STRINGS = [
    "My name is Robert from Neural Magic and I love working on vLLM so much!",
    "Red Hat is the best open source company by far across Linux, K8s, and AI.",
    "Nick is the name of my brother in addition to my colleague from Red Hat.",
]
STOP_STRINGS = ["I love working on", "company by far", "brother in"]
PROMPT_LEN = 5


def vectors(name: str) -> tuple[list[list[int]], list[list[int]], list[str]]:
    """vLLM's test vectors: each string's first five ids (with the BOS) are the prompt, the rest
    the generation, whose text is the string after the prompt's decode."""
    tok = helpers.tokenizer(name)
    full = [tok(text).input_ids for text in FULL_STRINGS]
    prompts = [ids[:PROMPT_LEN] for ids in full]
    generations = [ids[PROMPT_LEN:] for ids in full]
    prompt_lengths = [len(tok.decode(p, skip_special_tokens=True)) for p in prompts]
    return prompts, generations, [text[n:] for text, n in zip(FULL_STRINGS, prompt_lengths)]


def engine_steps(generations: list[list[int]], stop_final: bool = False) -> list[list[EngineCoreOutput]]:
    """What vLLM's mock engine core sends: one id per request per step, the last one ending it."""
    steps = []
    for position in range(max(map(len, generations))):
        steps.append(
            [
                EngineCoreOutput(
                    request_id=f"request-{index}",
                    new_token_ids=[ids[position]],
                    finish_reason=FinishReason.LENGTH if position == len(ids) - 1 else None,
                )
                for index, ids in enumerate(generations)
                if position < len(ids)
            ]
        )
    return steps


@pytest.mark.parametrize("name", ["llama3", "mistral_v03"])
@pytest.mark.parametrize("kind", [RequestOutputKind.DELTA, RequestOutputKind.FINAL_ONLY])
@pytest.mark.parametrize("stream_interval", [1, 5, 10])
def test_incremental_detokenization(name: str, kind: RequestOutputKind, stream_interval: int) -> None:
    """test_output_processor.py::test_incremental_detokenization: every request's text and ids, with
    ``skip_special_tokens=False, spaces_between_special_tokens=False``; with a stream interval the
    first delta has one id and the others (but the last) at least the interval."""
    prompts, generations, strings = vectors(name)
    processor = OutputProcessor(vllm_tokenizer(name), log_stats=False, stream_interval=stream_interval)
    for index, prompt in enumerate(prompts):
        processor.add_request(
            request(
                prompt,
                request_id=f"request-{index}",
                skip_special_tokens=False,
                spaces_between_special_tokens=False,
                output_kind=kind,
                stop=[],
            ),
            None,
        )
    texts: dict[str, str] = {}
    ids: dict[str, list[int]] = {}
    for batch in engine_steps(generations):
        done = processor.process_outputs(batch)
        assert not done.reqs_to_abort
        for out in done.request_outputs:
            new = out.outputs[0]
            if out.request_id not in texts:
                texts[out.request_id], ids[out.request_id] = new.text, list(new.token_ids)
                if kind == RequestOutputKind.DELTA:
                    assert len(new.token_ids) == 1
                continue
            texts[out.request_id] += new.text
            ids[out.request_id] += new.token_ids
            if kind == RequestOutputKind.DELTA and not out.finished:
                assert len(new.token_ids) >= stream_interval
    for index, (string, generation) in enumerate(zip(strings, generations)):
        assert texts[f"request-{index}"] == string
        assert ids[f"request-{index}"] == generation
    assert not processor.has_unfinished_requests()


@pytest.mark.parametrize("name", ["llama3", "mistral_v03"])
@pytest.mark.parametrize("include", [True, False])
def test_stop_string(name: str, include: bool) -> None:
    """test_output_processor.py::test_stop_string: each request stops at its stop string (the text
    before it, or through it), finishes with ``"stop"``, and is handed back to be aborted in the
    engine core; no output comes after that."""
    prompts, generations, strings = vectors(name)
    processor = OutputProcessor(vllm_tokenizer(name), log_stats=False)
    for index, prompt in enumerate(prompts):
        processor.add_request(
            request(
                prompt,
                request_id=f"request-{index}",
                skip_special_tokens=False,
                spaces_between_special_tokens=False,
                output_kind=RequestOutputKind.DELTA,
                stop=STOP_STRINGS,
                include_stop_str_in_output=include,
            ),
            None,
        )
    texts: dict[str, str] = {}
    aborted: list[str] = []
    for batch in engine_steps(generations):
        done = processor.process_outputs(batch)
        for out in done.request_outputs:
            assert out.request_id not in aborted
            if out.finished:
                assert out.outputs[0].finish_reason == "stop"
            texts[out.request_id] = texts.get(out.request_id, "") + out.outputs[0].text
        aborted += done.reqs_to_abort
    for index, (string, stop) in enumerate(zip(strings, STOP_STRINGS)):
        assert f"request-{index}" in aborted
        at = string.find(stop)
        assert texts[f"request-{index}"] == string[:at] + (stop if include else "")
    assert not processor.has_unfinished_requests()


@pytest.mark.parametrize("include", [True, False])
def test_stop_string_while_stop_token_terminates(include: bool) -> None:
    """tests/detokenizer/test_stop_string_while_stop_model_terminates.py: the engine core ends the
    request on its EOS in the same step whose ids complete a stop string: the stop string decides
    (the text before it, or through it), and the ids after the one completing it are dropped."""
    tok = vllm_tokenizer("qwen3")
    body = tok.encode("abcde", add_special_tokens=False)
    eos = helpers.tokenizer("qwen3").eos_token_id
    result = run(
        tok,
        [],
        [*body, eos],
        chunks=(len(body) + 1,),
        stop_id=True,
        stop=["cd"],
        include_stop_str_in_output=include,
    )
    assert result.text == ("abcd" if include else "ab")
    assert (result.finish_reason, result.stop_reason) == ("stop", "cd")
    kept = result.token_ids
    assert kept == [*body, eos][: len(kept)] and "cd" in tok.decode(kept)


def test_delta_text_and_ids_stay_in_step() -> None:
    """test_detokenizer_stop_string_sync.py's end-to-end case: with a stop string, the deltas add up
    to the text, which is what the ids decode to."""
    tok = vllm_tokenizer("qwen3")
    output = tok.encode("Hello world", add_special_tokens=False)
    result = run(tok, [], output, stop=["stop"])
    assert result.text == "Hello world" == tok.decode(result.token_ids)


@pytest.mark.parametrize("kind", [RequestOutputKind.DELTA, RequestOutputKind.CUMULATIVE])
def test_stop_reason(kind: RequestOutputKind) -> None:
    """tests/detokenizer/test_stop_reason.py: ``stop_reason`` is the stop string, the stop id the
    engine core stopped on, or None when the request ran to its length."""
    tok = vllm_tokenizer("llama2")
    output = tok.encode("one, two. three", add_special_tokens=False)
    by_string = run(tok, [1], output, stop=["."], output_kind=kind)
    assert (by_string.text, by_string.finish_reason, by_string.stop_reason) == ("one, two", "stop", ".")
    by_id = run(tok, [1], output[:3], stop_id=True, output_kind=kind)
    assert (by_id.finish_reason, by_id.stop_reason) == ("stop", output[2])
    assert by_id.text == tok.decode(output[:2])
    by_length = run(tok, [1], output, output_kind=kind)
    assert (by_length.finish_reason, by_length.stop_reason) == ("length", None)


def test_stop_strings_as_vllm_tests_them() -> None:
    """tests/detokenizer/test_stop_strings.py's cases: a stop string in the middle of the text, one
    that ends inside a token, one that starts the output, several at once, with and without the
    stop string in the output."""
    tok = vllm_tokenizer("llama3")
    output = tok.encode(" The quick brown fox jumps over the lazy dog.", add_special_tokens=False)
    cases = [
        (["fox"], False, " The quick brown "),
        (["fox"], True, " The quick brown fox"),
        (["qu"], False, " The "),  # ends inside the token " quick"
        (["ick b"], True, " The quick b"),
        ([" The"], False, ""),
        (["dog", "lazy", "over"], False, " The quick brown fox jumps "),
        (["cat"], False, " The quick brown fox jumps over the lazy dog."),
    ]
    for stops, include, text in cases:
        result = run(tok, [], output, stop=stops, include_stop_str_in_output=include)
        assert result.text == text, (stops, include)


def test_min_tokens_keeps_stop_strings_off_until_reached() -> None:
    """tests/detokenizer/test_min_tokens.py: within ``min_tokens`` a stop string does not end the
    request; after them it does."""
    tok = vllm_tokenizer("llama3")
    output = tok.encode(" a. b. c. d.", add_special_tokens=False)
    assert [tok.decode([i]) for i in output] == [" a", ".", " b", ".", " c", ".", " d", "."]
    early = run(tok, [], output, stop=["."], min_tokens=0)
    assert early.text == " a"
    late = run(tok, [], output, stop=["."], min_tokens=4)
    assert late.text == " a. b. c"  # the first four ids are " a. b."


def test_disable_detokenization() -> None:
    """tests/detokenizer/test_disable_detokenization.py: ``detokenize=False`` gives ids and no text."""
    tok = vllm_tokenizer("llama3")
    output = tok.encode(" Hello there", add_special_tokens=False)
    result = run(tok, [1], output, detokenize=False, output_kind=RequestOutputKind.CUMULATIVE)
    assert result.text == "" and result.token_ids == output
