"""Peers' own detokenizer test cases, run against puredetok.

The INPUTS and expected behaviours of vLLM's, SGLang's and transformers' detokenizer tests,
re-expressed (no peer code) on the tokenizers these tests carry, through the three faces an engine
uses: the core (``start``/``step``/``finish``), the stop layer (``open_stream``/``advance_many``/
``close``) and :class:`DetokenizeManager` (an explicit :class:`Opening` with the prompt ids and the
:class:`SamplingParams`, as an engine sends it).

Each case names the peer test it comes from (repository, path, test name). Where the peer's
expectation is ``tokenizer.decode``-exact, the assertion is the peer's own; where the peer expects
its own heuristic's output, the assertion is puredetok's contract (G1 / C, docs/guarantees.md) and
the comment says so; the differences are listed in docs/conformance.md ("Peers' own test cases").
"""

from __future__ import annotations

import asyncio
import functools
import queue
import random
from collections.abc import Sequence
from typing import Any

import pytest

import puredetok
from helpers import TOKENIZERS, byte_ids, codec, continuation, reference, tokenizer
from puredetok import StopRules, advance_many, close, open_stream
from puredetok._core import continuation_text
from puredetok.serving._messages import DetokenizeMsg, Opening, SamplingParams, UserReply
from puredetok.streamer import AsyncTextIteratorStreamer, TextIteratorStreamer, TextStreamer
from sources import source

# vllm-project/vllm tests/tokenization/test_detokenize.py: TRUTH (with SPECIAL_TOKS_TRUTH appended).
VLLM_TRUTH = (
    "Hello here, this is a simple test",
    "vLLM is a high-throughput and memory-efficient inference and serving engine for LLMs. It is "
    "designed to be used in production environments, where inference and serving",
    "我很感谢你的热情",
    "ပုံပြင်လေးပြောပြပါ်",
    "น้ำประปาที่สะอาดช่วยให้ครูใหญ่มีสุขภาพดี",
    "ครูให้คำปรึกษาเรื่องน้ํากับส๎กฤต",
    "Some text with adjacent special tokens                <|padding|><|padding|><fim_prefix>"
    "<fim_middle><fim_suffix>other text<fim_pad>",
)


def own_specials_truth(name: str) -> str:
    """SPECIAL_TOKS_TRUTH with this tokenizer's own added tokens in place of StarCoder's (which are
    plain text to ours): adjacent special tokens mid-text, as the peer case means."""
    added = [t.content for t in tokenizer(name).added_tokens_decoder.values()][:4]
    a, b, c, d = (added * 4)[:4]
    return f"Some text with adjacent special tokens                {a}{a}{b}{c}{d}other text{d}"


def ends(name: str) -> tuple[int | None, int]:
    """The bos and eos ids the vLLM test wraps the truth in (BERT has neither: [CLS] and [SEP],
    the ids an engine serving it uses)."""
    tok = tokenizer(name)
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.cls_token_id
    eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    return bos, eos


@functools.cache  # a manager reads the whole vocabulary (0.1 - 0.3 s): asked once per id below
def eos_ids(name: str) -> frozenset[int]:
    """The ids a manager of this tokenizer ends a request on (its EOS ids)."""
    return frozenset(source(name).manager().eos_token_ids)


def core_text(name: str, skip: bool, prompt: Sequence[int], ids: Sequence[int]) -> str:
    """The core's text for ``ids`` after ``prompt``, stepping one id at a time."""
    state, text = puredetok.start(codec(name, skip), prompt), ""
    for token_id in ids:
        state, delta = puredetok.step(state, token_id)
        text += delta
    return text + puredetok.finish(state)


def stop_text(
    name: str,
    rules: StopRules,
    chunks: Sequence[Sequence[int]],
    prompt: Sequence[int] = (),
    skip: bool = False,
) -> tuple[str, puredetok.FinishReason | None]:
    """The stop layer's text and finish reason for the ids given in these steps."""
    stream, text = open_stream(codec(name, skip), rules, prompt), ""
    for chunk in chunks:
        stream, delta = advance_many(stream, chunk)
        text += delta
        if stream.finish_reason is not None:
            return text, stream.finish_reason
    stream, tail = close(stream)
    return text + tail, stream.finish_reason


def managed(
    name: str,
    params: SamplingParams,
    chunks: Sequence[Sequence[int]],
    prompt: Sequence[int] = (),
    **finish: Any,
) -> tuple[str, UserReply]:
    """What a DetokenizeManager streams for one request: opened explicitly with the prompt and
    params, one message per chunk, the scheduler's ``finished`` on the last (with ``finish``'s
    reason); returns the text and the last reply."""
    manager = source(name).manager()
    opening = Opening(prompt_ids=tuple(prompt), params=params)
    text, last = "", None
    for at, chunk in enumerate(chunks):
        done = at == len(chunks) - 1
        msg = DetokenizeMsg(
            uid=7,
            token_ids=tuple(chunk),
            open=opening if at == 0 else None,
            finished=done,
            **(finish if done else {}),
        )
        (last,) = manager.handle([msg])
        assert last.error is None, last.error
        text += last.incremental_output
        if last.finished:
            break
    assert last is not None and last.finished and 7 not in manager
    return text, last


def encode(name: str, text: str) -> list[int]:
    return list(tokenizer(name)(text, add_special_tokens=False).input_ids)


# --- vLLM: tests/tokenization/test_detokenize.py ---------------------------------------------


def vllm_streaming_case(
    name: str, truth: str, with_prompt: bool, skip: bool
) -> tuple[list[int], list[int], str]:
    """vllm tests/tokenization/test_detokenize.py::test_decode_streaming's inputs: the truth's ids
    wrapped in bos/eos, split after the ids of the truth's first half (with_prompt), and the text
    it expects: ``decode(all)[len(decode(prompt)):]``."""
    bos, eos = ends(name)
    ids = ([bos] if bos is not None else []) + encode(name, truth) + [eos]
    whole = reference(name, ids, skip)
    if not with_prompt:
        return [], ids, whole
    cut = len(encode(name, truth[: len(truth) // 2])) + (bos is not None)
    return ids[:cut], ids[cut:], whole[len(reference(name, ids[:cut], skip)) :]


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("skip", [False, True], ids=["keep", "skip"])
def test_vllm_decode_streaming(name: str, skip: bool) -> None:
    """vllm-project/vllm tests/tokenization/test_detokenize.py::test_decode_streaming (every TRUTH,
    with and without a prompt, both skip_special_tokens, both spaces_between_special_tokens; its
    `fast` axis is vLLM's two implementations, one here). The peer's expectation is decode-exact:
    on every case here decode(prompt) is a prefix of decode(all), so it equals contract C, and the
    three faces must give it exactly."""
    for truth in (*VLLM_TRUTH, own_specials_truth(name)):
        for with_prompt in (False, True):
            prompt, ids, expected = vllm_streaming_case(name, truth, with_prompt, skip)
            assert expected == continuation(name, prompt, ids, skip)
            assert core_text(name, skip, prompt, ids) == expected, (truth, with_prompt)
            assert stop_text(name, StopRules(), [[i] for i in ids], prompt, skip)[0] == expected
            for spaces in (True, False):  # only slow (Python) tokenizers act on it; none of ours
                if skip and not spaces:
                    continue  # the peer skips this combination
                params = SamplingParams(
                    skip_special_tokens=skip, spaces_between_special_tokens=spaces, ignore_eos=True
                )
                text, reply = managed(name, params, [[i] for i in ids], prompt)
                assert text == expected and reply.finish_reason == "length", (truth, with_prompt)
                # As an engine really ends it: the first EOS id (the wrapping one, or one of the
                # specials mid-text) stops the request and adds no text.
                params = SamplingParams(skip_special_tokens=skip, spaces_between_special_tokens=spaces)
                text, reply = managed(
                    name, params, [[i] for i in ids], prompt, finish_reason="stop", matched_stop=ids[-1]
                )
                first = next(at for at, i in enumerate(ids) if i in eos_ids(name) or at == len(ids) - 1)
                assert text == continuation(name, prompt, ids[:first], skip) and reply.finish_reason == "stop"


@pytest.mark.parametrize("name", TOKENIZERS)
def test_vllm_oov_decode(name: str) -> None:
    """vllm-project/vllm tests/tokenization/test_detokenize.py::test_oov_decode: the id
    ``len(tokenizer)`` streams "" (decode-exact: ``tokenizer.decode`` gives "" too) with puredetok's
    ``out_of_vocab="ignore"``; by default it is a clear per-request error (G7)."""
    oov = len(tokenizer(name))
    assert reference(name, [oov], True) == ""
    text, reply = managed(name, SamplingParams(out_of_vocab="ignore"), [[oov]])
    assert text == "" and reply.error is None
    manager = source(name).manager()
    (reply,) = manager.handle([DetokenizeMsg(uid=1, token_ids=(oov,), open=Opening(), finished=True)])
    assert reply.error is not None and str(oov) in reply.error


@pytest.mark.parametrize("name", TOKENIZERS)
def test_vllm_decode_sequence_logprobs(name: str) -> None:
    """vllm-project/vllm tests/tokenization/test_detokenize.py::test_decode_sequence_logprobs (its
    sequence text; logprob texts are not puredetok's): prompt ``[1]``, output the ids of each
    TRUTH with the tokenizer's special tokens, skip_special_tokens=True. The peer expects the truth
    itself, decode-exact wherever ``decode`` gives the truth back (every tokenizer the peer runs);
    T5 and uncased BERT do not give it back (unknown characters, lower case), and there the
    expectation is contract C's text."""
    tok = tokenizer(name)
    for truth in VLLM_TRUTH:
        ids = list(tok(truth).input_ids)
        text = core_text(name, True, [1], ids)
        assert text == continuation(name, [1], ids, True)
        if reference(name, ids, True) == truth and reference(name, [1], True) == "":
            assert text == truth
        params = SamplingParams(ignore_eos=True)
        assert managed(name, params, [[i] for i in ids], [1])[0] == text


@pytest.mark.parametrize("name", TOKENIZERS)
def test_vllm_decode_prompt_logprobs(name: str) -> None:
    """vllm-project/vllm tests/tokenization/test_detokenize.py::test_decode_prompt_logprobs: the
    text of a sequence after its first id (``decode(all)[len(decode(first)):]``, skip_special_tokens
    =True), here the output after a one-id prompt. Equal to the peer's wherever ``decode(first)`` is
    a prefix of ``decode(all)``; where the first id is part of a character (GPT-2, Phi-2, Llama-3 on
    CJK, Burmese, Thai) ``decode(first)`` is a U+FFFD and the peer's slice drops the character the
    next ids complete, while contract C sends it (docs/conformance.md)."""
    tok = tokenizer(name)
    differ = 0
    for truth in VLLM_TRUTH:
        ids = list(tok(truth).input_ids)
        first, whole = reference(name, ids[:1], True), reference(name, ids, True)
        text = core_text(name, True, ids[:1], ids[1:])
        assert text == continuation_text(first, whole)
        if whole.startswith(first):
            assert text == whole[len(first) :]
        else:
            differ += 1
            assert first.endswith("\ufffd") and text == whole[len(first) - 1 :]
    assert differ == 0 or name in ("gpt2", "phi2", "llama3")


THAI_EDGES = ("น้ำ", "น้ํา", "ส๎กฤต")


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
def test_vllm_thai_edge_case(name: str) -> None:
    """vllm-project/vllm tests/tokenization/test_detokenize.py::test_thai_edge_case (gpt2 and
    Llama-3.2, whose vocabulary llama3 here shares): streamed one id at a time the text is the
    truth itself (decode-exact), nothing retracted, no transient U+FFFD."""
    for truth in THAI_EDGES:
        ids = encode(name, truth)
        state, sent = puredetok.start(codec(name, True)), ""
        for token_id in ids:
            state, delta = puredetok.step(state, token_id)
            assert "\ufffd" not in delta
            sent += delta
            assert truth.startswith(sent)
        assert sent + puredetok.finish(state) == truth
        assert managed(name, SamplingParams(), [[i] for i in ids])[0] == truth


@pytest.mark.parametrize("truth", ["Hello world 🌶 is spicy", "สวัสดีครับ"])
def test_vllm_incomplete_utf8_prompt_no_leak(truth: str) -> None:
    """vllm-project/vllm tests/tokenization/test_detokenize.py::test_incomplete_utf8_prompt_no_leak
    (gpt2): the prompt ends mid-character. No prompt text leaks (the peer's point, kept). The peer
    expects ``decode(all)[len(decode(prompt)):]``, which drops the character the output completes
    ("🌶", "บ") because decode(prompt) ends in a U+FFFD counted as one character; puredetok keeps
    contract C: the completed character is the output's first text (docs/conformance.md)."""
    name = "gpt2"
    ids = encode(name, truth)
    cut = next(i for i in range(len(ids) - 1, 0, -1) if reference(name, ids[:i]).endswith("\ufffd"))
    prompt_text, whole = reference(name, ids[:cut]), reference(name, ids)
    peer = whole[len(prompt_text) :]
    ours = continuation_text(prompt_text, whole)
    assert ours == whole[len(prompt_text) - 1 :] and ours.endswith(peer) and len(ours) == len(peer) + 1
    for text in (
        core_text(name, True, ids[:cut], ids[cut:]),
        stop_text(name, StopRules(), [[i] for i in ids[cut:]], ids[:cut], True)[0],
        managed(name, SamplingParams(), [[i] for i in ids[cut:]], ids[:cut])[0],
    ):
        assert text == ours
        assert prompt_text[:-1] not in text


# --- vLLM: tests/detokenizer/ -------------------------------------------------------------------

MIN_TOKENS_PROMPT = "Hello, my name is Lee, and I'm a student in the " + "college of engineering"


@pytest.mark.parametrize(
    ("min_tokens", "stop", "truth"),
    [
        (0, (), " is Lee, and I'm a student in the college of engineering"),
        (0, ("e",), " is L"),
        (5, ("e",), " is Lee, and I'm a stud"),
    ],
)
def test_vllm_min_tokens_with_stop(min_tokens: int, stop: tuple[str, ...], truth: str) -> None:
    """vllm-project/vllm tests/detokenizer/test_min_tokens.py::test_min_tokens_with_stop (OPT-125m,
    whose byte-level BPE and merges are GPT-2's: the same tokens, so the same texts): prompt = the
    first 4 ids, the rest generated. Exactly the peer's texts: within min_tokens the text is not
    searched for "e"."""
    ids = encode("gpt2", MIN_TOKENS_PROMPT)
    prompt, output = ids[:4], ids[4:]
    rules = StopRules(stop=stop, min_tokens=min_tokens)
    assert stop_text("gpt2", rules, [output], prompt)[0] == truth  # as the peer: one update
    assert stop_text("gpt2", rules, [[i] for i in output], prompt)[0] == truth
    params = SamplingParams(stop=stop, min_tokens=min_tokens)
    text, reply = managed("gpt2", params, [[i] for i in output], prompt)
    assert text == truth and reply.finish_reason == ("stop" if stop else "length")


def user_ids(name: str, *parts: str) -> list[list[int]]:
    """The ids of consecutive texts, each part a step."""
    whole = encode(name, "".join(parts))
    steps, done = [], 0
    for at in range(1, len(parts) + 1):
        upto = len(encode(name, "".join(parts[:at])))
        steps.append(whole[done:upto])
        done = upto
    assert sum(steps, []) == whole
    return steps


@pytest.mark.parametrize("stop", [["a", "is"], ["is", "a"]])
@pytest.mark.parametrize("include", [False, True])
def test_vllm_earliest_completing_stop_wins(stop: list[str], include: bool) -> None:
    """vllm-project/vllm tests/detokenizer/test_check_stop_strings.py::
    test_earliest_completing_stop_wins_regardless_of_list_order and
    ::test_earliest_completing_stop_include_in_output: " is a" appended in one step after
    " The user"; "is" wins whatever the order; text " The user " or " The user is" (the peer's)."""
    steps = user_ids("gpt2", " The user", " is a")
    expected = " The user is" if include else " The user "
    rules = StopRules(stop=stop, include_stop_str_in_output=include)
    text, reason = stop_text("gpt2", rules, steps)
    assert (text, reason) == (expected, puredetok.FinishReason("stop", "is"))
    params = SamplingParams(stop=tuple(stop), include_stop_str_in_output=include)
    text, reply = managed("gpt2", params, steps)
    assert (text, reply.finish_reason, reply.matched_stop) == (expected, "stop", "is")


@pytest.mark.parametrize(
    ("text", "stop", "matched", "expected"),
    [
        # ::test_completion_position_not_start_position: "b" completes first.
        ("abc", ["abc", "b"], "b", "a"),
        # ::test_ties_broken_by_list_order, first row: "ab" listed first wins (the peer's "ab", 0).
        ("ab", ["ab", "b"], "ab", ""),
        # ::test_ties_broken_by_list_order, second row: the peer lets "b" win by list order ("a");
        # puredetok's documented tie rule (docs/stops.md) cuts at the earliest start whatever the
        # order: "ab" wins, text "" (a prefix of the peer's; docs/conformance.md).
        ("ab", ["b", "ab"], "ab", ""),
        # ::test_single_stop_in_window_unchanged
        ("hello world.", ["."], ".", "hello world"),
    ],
)
def test_vllm_check_stop_strings(text: str, stop: list[str], matched: str, expected: str) -> None:
    """vllm-project/vllm tests/detokenizer/test_check_stop_strings.py: the whole text in one step,
    and the same text one byte token at a time (every chunking agrees)."""
    rules = StopRules(stop=stop)
    whole = encode("gpt2", text)
    one_by_one = [[byte_ids("gpt2")[b]] for b in text.encode()]
    for steps in ([whole], one_by_one):
        assert stop_text("gpt2", rules, steps) == (expected, puredetok.FinishReason("stop", matched))
    include = StopRules(stop=stop, include_stop_str_in_output=True)
    assert stop_text("gpt2", include, [whole])[0] == text[: text.index(matched) + len(matched)]


def test_vllm_no_match_and_empty_inputs() -> None:
    """vllm-project/vllm tests/detokenizer/test_check_stop_strings.py::
    test_no_match_and_empty_inputs_return_none: no stop string matches, none given, or no new text."""
    ids = encode("gpt2", "hello")
    assert stop_text("gpt2", StopRules(stop=["zzz"]), [ids])[0] == "hello"
    assert stop_text("gpt2", StopRules(), [ids]) == ("hello", puredetok.FinishReason("length"))
    stream, text = advance_many(open_stream(codec("gpt2"), StopRules(stop=["h"])), [])
    assert text == "" and stream.finish_reason is None


@pytest.mark.parametrize("ignore_eos", [True, False])
@pytest.mark.parametrize("include", [True, False])
def test_vllm_stop_on_eos_token(ignore_eos: bool, include: bool) -> None:
    """vllm-project/vllm tests/detokenizer/test_stop_checker.py::test_stop_on_eos_token ("This text
    ends with EOS token" then "</s>", id 2 on Llama-2; min_tokens=1): ignored, the EOS is text
    ("</s>" kept, skip_special_tokens=False); else it stops, its text only with
    include_stop_str_in_output. Exactly the peer's texts."""
    body = "This text ends with EOS token"
    ids = encode("llama2", body) + [2]
    base = reference("llama2", ids[:-1])
    expected = base + "</s>" if ignore_eos or include else base
    rules = StopRules(
        eos_token_ids=[2], ignore_eos=ignore_eos, include_stop_str_in_output=include, min_tokens=1
    )
    text, reason = stop_text("llama2", rules, [[i] for i in ids])
    assert text == expected
    assert reason == (puredetok.FinishReason("length") if ignore_eos else puredetok.FinishReason("stop", 2))
    params = SamplingParams(
        skip_special_tokens=False, ignore_eos=ignore_eos, include_stop_str_in_output=include, min_tokens=1
    )
    text, reply = managed("llama2", params, [[i] for i in ids])
    assert text == expected and reply.finish_reason == ("length" if ignore_eos else "stop")


@pytest.mark.parametrize("include", [False, True])
def test_vllm_stop_string_while_stop_token_terminates(include: bool) -> None:
    """vllm-project/vllm tests/detokenizer/test_stop_string_while_stop_model_terminates.py::
    test_stop_string_while_stop_token_terminates: "abcde" then a stop token "Z" in one update, stop
    string "cd": the stop string wins ("ab" / "abcd"), also when the scheduler says it stopped on Z."""
    name = "gpt2"
    chars = [byte_ids(name)[ord(c)] for c in "abcdeZ"]
    z = chars[-1]
    rules = StopRules(stop=["cd"], stop_token_ids=[z], include_stop_str_in_output=include)
    expected = "abcd" if include else "ab"
    assert stop_text(name, rules, [chars]) == (expected, puredetok.FinishReason("stop", "cd"))
    params = SamplingParams(stop=("cd",), include_stop_str_in_output=include)
    text, reply = managed(name, params, [chars], finish_reason="stop", matched_stop=z)
    assert (text, reply.finish_reason, reply.matched_stop) == (expected, "stop", "cd")


STORY_PROMPT = "A story about vLLM:\n"
STORY = "VLLM is a 100% volunteer organization. We are a group of people who love"


def story() -> tuple[list[int], list[int]]:
    """vllm tests/detokenizer/test_stop_strings.py's request on Llama-2: the prompt (with <s>) and
    the greedy output the test expects, as ids (13013 " organization", 2318 310 2305 "group of
    people", as the peer's comments say)."""
    tok = tokenizer("llama2")
    prompt = list(tok(STORY_PROMPT).input_ids)
    whole = list(tok(STORY_PROMPT + STORY).input_ids)
    assert whole[: len(prompt)] == prompt and prompt[-1] == 13  # the prompt ends in <0x0A>
    output = whole[len(prompt) :]
    assert 13013 in output and output[output.index(2318) : output.index(2318) + 3] == [2318, 310, 2305]
    return prompt, output


@pytest.mark.parametrize(
    ("stop", "stop_token_ids", "include", "expected", "matched"),
    [
        # _stop_basic
        ((".",), (), False, "VLLM is a 100% volunteer organization", "."),
        ((".",), (), True, "VLLM is a 100% volunteer organization.", "."),
        # _stop_multi_tokens
        (
            ("group of peo", "short"),
            (),
            False,
            "VLLM is a 100% volunteer organization. We are a ",
            "group of peo",
        ),
        (
            ("group of peo", "short"),
            (),
            True,
            "VLLM is a 100% volunteer organization. We are a group of peo",
            "group of peo",
        ),
        # _stop_partial_token: the stop ends inside the token " organization"
        (("gani",), (), False, "VLLM is a 100% volunteer or", "gani"),
        (("gani",), (), True, "VLLM is a 100% volunteer organi", "gani"),
        # _stop_token_id: the stop token's text only with include_stop_str_in_output
        ((), (13013,), False, "VLLM is a 100% volunteer", 13013),
        ((), (13013,), True, "VLLM is a 100% volunteer organization", 13013),
        # _stop_token_id_multi, overlapping single id 2318 ("group")
        ((), (2318,), False, "VLLM is a 100% volunteer organization. We are a", 2318),
        ((), (2318,), True, "VLLM is a 100% volunteer organization. We are a group", 2318),
    ],
)
def test_vllm_stop_strings(
    stop: tuple[str, ...], stop_token_ids: tuple[int, ...], include: bool, expected: str, matched: str | int
) -> None:
    """vllm-project/vllm tests/detokenizer/test_stop_strings.py::test_stop_strings (Llama-2, prompt
    "A story about vLLM:\\n"): the same stop strings and stop ids over the output the peer expects,
    exactly the peer's texts and stop reasons; the prompt's newline is neither emitted nor matched.
    (Its stop_token_ids given as id sequences, [[2318, 310, 2305]], are a vLLM extension puredetok
    does not take: docs/conformance.md.)"""
    prompt, output = story()
    rules = StopRules(stop=stop, stop_token_ids=stop_token_ids, include_stop_str_in_output=include)
    for steps in ([[i] for i in output], [output]):
        assert stop_text("llama2", rules, steps, prompt, True) == (
            expected,
            puredetok.FinishReason("stop", matched),
        )
    params = SamplingParams(
        stop=stop, stop_token_ids=stop_token_ids, include_stop_str_in_output=include, max_tokens=200
    )
    text, reply = managed("llama2", params, [[i] for i in output], prompt)
    assert (text, reply.finish_reason, reply.matched_stop) == (expected, "stop", matched)


def test_vllm_stop_strings_without_stop() -> None:
    """vllm-project/vllm tests/detokenizer/test_stop_strings.py (the request with no stop): the
    whole output, decode-exact, starting after the prompt's newline."""
    prompt, output = story()
    assert core_text("llama2", True, prompt, output) == STORY == continuation("llama2", prompt, output, True)


# --- SGLang: test/registered/unit/managers/ --------------------------------------------------


def byte_steps(name: str, chunks: Sequence[bytes]) -> list[list[int]]:
    """One step per chunk of bytes, one byte token per byte (SGLang's stub tokenizers are byte
    tokenizers; a real byte-level vocabulary has the same byte tokens)."""
    table = byte_ids(name)
    return [[table[b] for b in chunk] for chunk in chunks]


GEN = "你好，世".encode()
SPACED = "A 世好a世".encode()


@pytest.mark.parametrize("name", ["qwen3", "gpt2", "llama2"])
@pytest.mark.parametrize(
    "chunks",
    [
        [GEN[:5], GEN[5:10], GEN[10:]],  # ::test_incomplete_character_does_not_duplicate_text
        [SPACED[:6], SPACED[6:10], SPACED[10:]],  # ::test_space_retreat_does_not_duplicate_text
        [GEN[:5], b"", GEN[5:]],  # ::test_empty_streaming_step_does_not_reset_sent_offset
        [b"hello ", b"world ", b"bye"],  # ::test_plain_ascii_stream_is_unchanged
    ],
)
def test_sglang_stream_offsets(name: str, chunks: list[bytes]) -> None:
    """sgl-project/sglang test/registered/unit/managers/test_detokenizer_stream_offsets.py: prompt
    tail "Q: ", generated bytes in chunks that end mid-character, the last message finished. The
    peer expects the generated text once (decode-exact: the prompt ends on a whole character);
    every chunking of the manager gives it, and each reply is a prefix-safe, FFFD-free delta."""
    prompt, steps = byte_steps(name, [b"Q: "])[0], byte_steps(name, chunks)
    expected = b"".join(chunks).decode()
    assert expected == continuation(name, prompt, sum(steps, []))
    text, reply = managed(name, SamplingParams(), [*steps, []], prompt)
    assert text == expected and "\ufffd" not in text
    assert core_text(name, True, prompt, sum(steps, [])) == expected


@pytest.mark.parametrize("name", ["qwen3", "llama2"])
def test_sglang_replacement_char_stream_keeps_moving(name: str) -> None:
    """sgl-project/sglang test/registered/unit/managers/test_detokenizer_incremental.py::
    test_replacement_char_stream_keeps_offsets_moving: a stream of lone continuation bytes (0x80),
    4 per step, after 5 text tokens. The peer asks that text reaches the client and the work per
    step does not grow; here: every step's text is the U+FFFD the final decode has for the bytes
    already certain (byte-level: each byte; byte-fallback: a poisoned run), and the state's size
    stays constant."""
    text_id = encode(name, "a")[-1]
    prompt = [text_id] * 5
    stray = byte_steps(name, [b"\x80" * 4])[0]
    state = puredetok.start(codec(name, True), prompt)
    sizes, sent = set(), ""
    for _ in range(256):
        state, delta = puredetok.feed(state, stray)
        sent += delta
        sizes.add(len(state.to_bytes()))
    assert sent and set(sent) == {"\ufffd"}
    assert sent + puredetok.finish(state) == continuation(name, prompt, stray * 256, True)
    assert max(sizes) - min(sizes) <= 8  # a counter or two, never the stream


@pytest.mark.parametrize("name", ["qwen3", "llama2"])
@pytest.mark.parametrize("count", [1, 32])
def test_sglang_split_character_held_then_whole(name: str, count: int) -> None:
    """sgl-project/sglang test/registered/unit/managers/test_detokenizer_incremental.py::
    test_incomplete_character_is_still_held_back and ::test_stall_counter_resets_on_a_clean_step:
    "中" (E4 B8 AD) one byte per step, once and 32 times: exactly "中" * count, never a U+FFFD."""
    steps = byte_steps(name, [bytes([b]) for b in "中".encode()] * count)
    prompt = encode(name, "a")[-1:]
    text, _ = managed(name, SamplingParams(), [*steps, []], prompt)
    assert text == "中" * count


def test_sglang_recovery_retreat_does_not_duplicate() -> None:
    """sgl-project/sglang test/registered/unit/managers/test_detokenizer_stream_offset.py::
    test_recovery_retreat_does_not_duplicate: the peer's stub table ("A 世�", "A 世a�", "A 世ab")
    is no real tokenizer's, so the same shape is built from Qwen3's real tokens: "A 世" and a lead
    byte, then steps that each end in an incomplete character which the next step completes or
    spoils. The client gets decode(all) once, "世" never duplicated."""
    name = "qwen3"
    table = byte_ids(name)
    steps = [
        encode(name, "A 世") + [table[0xE5]],
        [table[0xA5], table[0xBD], table[0x61], table[0xE4]],
        [table[0x62]],
    ]
    expected = reference(name, sum(steps, []))
    assert expected == "A 世好a\ufffdb"
    text, _ = managed(name, SamplingParams(), [*steps, []])
    assert text == expected and text.count("世") == 1


def test_sglang_eviction_read_offset() -> None:
    """sgl-project/sglang test/registered/unit/managers/test_detokenizer_eviction_read_offset.py::
    test_chunk_committed_offset_is_relative_to_chunk: ids 11..18, the first three sent before the
    request's state leaves the worker, the rest after it is re-established elsewhere. The peer's
    point: no id's text is dropped. puredetok's manager never evicts a live state; a state that
    moves (detach, attach on another manager) continues exactly: the client gets decode(11..18)
    once."""
    ids = list(range(11, 19))
    first, second = source("gpt2").manager(), source("gpt2").manager()
    (reply,) = first.handle([DetokenizeMsg(uid=3, token_ids=tuple(ids[:3]), open=Opening())])
    second.attach(3, first.detach(3))
    (tail,) = second.handle([DetokenizeMsg(uid=3, token_ids=tuple(ids[3:]), finished=True)])
    assert reply.incremental_output + tail.incremental_output == reference("gpt2", ids, True) == ",-./0123"
    assert 3 not in first and 3 not in second


def test_sglang_hello_world_stream() -> None:
    """sgl-project/sglang test/registered/unit/managers/test_detokenizer_stream_offset.py::
    test_normal_ascii_streaming_unaffected: "hello", " wor", "ld" → "hello world"."""
    steps = user_ids("gpt2", "hello", " wor", "ld")
    assert managed("gpt2", SamplingParams(), steps)[0] == "hello world"


@pytest.mark.parametrize("include", [False, True])
def test_sglang_trim_matched_stop(include: bool) -> None:
    """sgl-project/sglang test/registered/unit/managers/test_detokenizer_manager.py::
    TestTrimMatchedStop (test_single_str, test_multi_strs_trim_at_earliest, test_no_stop_trim,
    test_multi_strs_none_match): "hello world" with stop "world" → "hello " ("hello world" with
    no_stop_trim, puredetok's include_stop_str_in_output); "hello world foo" with both stops →
    "hello "; "hello" → "hello". The peer's texts exactly; nothing after the stop is ever sent."""
    cases = [
        ("hello world", ("world",), "hello world" if include else "hello "),
        ("hello world foo", ("world", "foo"), "hello world" if include else "hello "),
        ("hello", ("world", "foo"), "hello"),
        # test_detokenizer_stop_trim.py::test_unmatched_length_and_string_stops
        ("answerENDtail", ("END",), "answerEND" if include else "answer"),
    ]
    for body, stop, expected in cases:
        params = SamplingParams(stop=stop, include_stop_str_in_output=include)
        steps = [[i] for i in encode("qwen3", body)]
        assert managed("qwen3", params, [*steps, []])[0] == expected


@pytest.mark.parametrize("token_text", ["!", "?"])
def test_sglang_zero_and_nonzero_stop_token_ids(token_text: str) -> None:
    """sgl-project/sglang test/registered/unit/managers/test_detokenizer_stop_trim.py::
    test_zero_and_nonzero_stop_token_ids (ids 0 and 30): a stop token, id 0 included (a falsy id),
    ends the request and its text is dropped ([123, id] → the text of [123]); with no_stop_trim
    (include_stop_str_in_output) it is kept; on the scheduler's word alone too. gpt2: 0 is "!",
    30 is "?"."""
    name = "gpt2"
    stop_id = encode(name, token_text)[0]
    assert stop_id in (0, 30)
    for include in (False, True):
        expected = reference(name, [123, stop_id] if include else [123])
        params = SamplingParams(stop_token_ids=(stop_id,), include_stop_str_in_output=include)
        text, reply = managed(name, params, [[123, stop_id], [5]])
        assert (text, reply.finish_reason, reply.matched_stop) == (expected, "stop", stop_id)
        params = SamplingParams(include_stop_str_in_output=include)
        text, reply = managed(name, params, [[123, stop_id]], finish_reason="stop", matched_stop=stop_id)
        assert text == expected
        assert stop_text(name, StopRules(stop_token_ids=[stop_id]), [[stop_id]])[0] == ""


# --- transformers: tests/generation/test_streamers.py -------------------------------------------


def fake_generate(streamer: Any, prompt: list[int], output: list[int]) -> None:
    """What ``model.generate`` does to a streamer: the prompt as a (1, n) batch, each new id as a
    (1,) batch, then ``end()``."""
    streamer.put([prompt])
    for token_id in output:
        streamer.put([token_id])
    streamer.end()


def random_request(seed: int) -> tuple[list[int], list[int]]:
    """The peer's shape: 5 random prompt ids (``ids_tensor((1, 5), vocab_size)``) and 10 generated
    ids (a tiny random model's greedy ids: random ids here), over GPT-2's whole vocabulary."""
    rng = random.Random(seed)
    size = len(tokenizer("gpt2"))
    return [rng.randrange(size) for _ in range(5)], [rng.randrange(size) for _ in range(10)]


@pytest.mark.parametrize("seed", range(8))
def test_transformers_text_streamer_matches_non_streaming(
    seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """huggingface/transformers tests/generation/test_streamers.py::
    test_text_streamer_matches_non_streaming: the printed text, less the final newline, is
    ``decode(prompt + output)`` (decode-exact, as the peer's)."""
    prompt, output = random_request(seed)
    fake_generate(TextStreamer(tokenizer("gpt2")), prompt, output)
    printed = capsys.readouterr().out
    assert printed.endswith("\n") and printed[:-1] == reference("gpt2", prompt + output)


@pytest.mark.parametrize("seed", range(8))
def test_transformers_text_streamer_skip_prompt(seed: int, capsys: pytest.CaptureFixture[str]) -> None:
    """huggingface/transformers tests/generation/test_streamers.py::test_text_streamer_skip_prompt:
    the peer expects ``decode(output)`` alone; puredetok prints the output as it continues the
    prompt (contract C), which is ``decode(output)`` whenever the output does not join the prompt's
    last character or word (docs/conformance.md), and asserts both where they agree."""
    prompt, output = random_request(seed)
    fake_generate(TextStreamer(tokenizer("gpt2"), skip_prompt=True), prompt, output)
    printed = capsys.readouterr().out[:-1]
    assert printed == continuation("gpt2", prompt, output)
    if reference("gpt2", prompt + output) == reference("gpt2", prompt) + reference("gpt2", output):
        assert printed == reference("gpt2", output)


def test_transformers_text_streamer_skip_prompt_split_character(capsys: pytest.CaptureFixture[str]) -> None:
    """huggingface/transformers tests/generation/test_streamers.py::test_text_streamer_skip_prompt,
    with the prompt ending inside "🌶" (GPT-2): the peer's expectation, ``decode(output)`` alone,
    starts with U+FFFD for the character's last bytes; puredetok prints contract C's text, the
    character whole ("🌶 is spicy"), as the prompt and output decode together (docs/conformance.md)."""
    ids = encode("gpt2", "Hello world 🌶 is spicy")
    cut = next(i for i in range(len(ids) - 1, 0, -1) if reference("gpt2", ids[:i]).endswith("\ufffd"))
    fake_generate(TextStreamer(tokenizer("gpt2"), skip_prompt=True), ids[:cut], ids[cut:])
    printed = capsys.readouterr().out[:-1]
    assert printed == "🌶 is spicy" == continuation("gpt2", ids[:cut], ids[cut:])
    assert reference("gpt2", ids[cut:]).startswith("\ufffd")


def test_transformers_text_streamer_decode_kwargs(capsys: pytest.CaptureFixture[str]) -> None:
    """huggingface/transformers tests/generation/test_streamers.py::test_text_streamer_decode_kwargs
    (distilgpt2, GPT-2's vocabulary): prompt of five bos ids, one generated id,
    skip_special_tokens=True: the special prompt is not printed, so the printed text re-encodes to
    exactly one id (the peer's check)."""
    tok = tokenizer("gpt2")
    generated = encode("gpt2", " Hello")
    assert len(generated) == 1
    fake_generate(TextStreamer(tok, skip_special_tokens=True), [tok.bos_token_id] * 5, generated)
    printed = capsys.readouterr().out[:-1]
    assert printed == " Hello" and len(encode("gpt2", printed)) == 1


@pytest.mark.parametrize("seed", range(4))
def test_transformers_iterator_streamer_matches_non_streaming(seed: int) -> None:
    """huggingface/transformers tests/generation/test_streamers.py::
    test_iterator_streamer_matches_non_streaming: iterated text == decode(prompt + output)."""
    prompt, output = random_request(seed)
    streamer = TextIteratorStreamer(tokenizer("gpt2"))
    fake_generate(streamer, prompt, output)
    assert "".join(streamer) == reference("gpt2", prompt + output)


def test_transformers_iterator_streamer_timeout() -> None:
    """huggingface/transformers tests/generation/test_streamers.py::test_iterator_streamer_timeout:
    nothing arrives within the timeout, so iterating raises ``queue.Empty``."""
    streamer = TextIteratorStreamer(tokenizer("gpt2"), timeout=0.001)
    with pytest.raises(queue.Empty):
        next(iter(streamer))


@pytest.mark.parametrize("seed", range(4))
def test_transformers_async_iterator_streamer_matches_non_streaming(seed: int) -> None:
    """huggingface/transformers tests/generation/test_streamers.py::AsyncStreamerTester::
    test_async_iterator_streamer_matches_non_streaming."""
    prompt, output = random_request(seed)

    async def collect() -> str:
        streamer = AsyncTextIteratorStreamer(tokenizer("gpt2"))
        fake_generate(streamer, prompt, output)
        return "".join([text async for text in streamer])

    assert asyncio.run(collect()) == reference("gpt2", prompt + output)


def test_transformers_async_iterator_streamer_timeout() -> None:
    """huggingface/transformers tests/generation/test_streamers.py::AsyncStreamerTester::
    test_async_iterator_streamer_timeout: nothing arrives, ``TimeoutError``."""

    async def first() -> str:
        streamer = AsyncTextIteratorStreamer(tokenizer("gpt2"), timeout=0.001)
        return await streamer.__anext__()

    with pytest.raises(TimeoutError):
        asyncio.run(first())
