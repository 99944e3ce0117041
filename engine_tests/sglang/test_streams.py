"""SGLang's detokenizer process with puredetok, fed random requests by a stand-in scheduler: every
client gets the exact text (contract C after the prompt ids the scheduler sends), trimmed at a
matched stop as SGLang trims, whatever the batching, streaming, options and finish reasons.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from puredetok import Codec, codec_for, feed, start
from sglang_helpers import VERSION, decoder, detokenizer, exact_text, fresh_rid, needs_plugin, tokenizer
from sglang_process import PROMPT_WINDOW, Request, Row, iterations, token_batch

pytestmark = needs_plugin

TEXTS = (
    "Hello world! naïve café, 1+1=2.\n",
    "推理引擎 😀 streams text: 第二行結束。",
    "Ελληνικά русский עברית العربية हिन्दी 日本語 한국어",
    "don't stop , . ? ! it 's ok",
    "🦩🦩 鱻䨻 👩‍👩‍👧 ┌──┐",
    "   spaces\tand\n\nnewlines  ",
)

NAMES = ("qwen3", "llama2", "mistral_v03", "t5_small")


def id_lists(name: str, min_size: int = 1) -> st.SearchStrategy[list[int]]:
    """Ids from the whole vocabulary (added tokens included), or the ids of a real text."""
    size = len(tokenizer(name))
    return st.one_of(
        st.lists(st.integers(0, size - 1), min_size=min_size, max_size=24),
        st.sampled_from(TEXTS).map(lambda text: tokenizer(name).encode(text, add_special_tokens=False)),
    ).filter(lambda ids: len(ids) >= min_size)


@st.composite
def requests(draw: Any, name: str) -> Request:
    """A request of a stand-in scheduler: any prompt (or none), options, batching and ending."""
    output = draw(id_lists(name))
    ending = draw(st.sampled_from(["length", "abort"]))
    return Request(
        fresh_rid(name),
        draw(st.one_of(st.just([]), id_lists(name))),
        output,
        {"type": "length", "length": len(output)}
        if ending == "length"
        else {"type": "abort", "message": "gone"},
        skip_special_tokens=draw(st.booleans()),
        spaces_between_special_tokens=draw(st.booleans()),
        per_step=draw(st.sampled_from([1, 1, 2, 3])),
        stream=draw(st.booleans()),
        start_at=draw(st.integers(0, 3)),
    )


@pytest.mark.parametrize("name", NAMES)
def test_every_client_gets_the_exact_text(name: str) -> None:
    @given(st.lists(requests(name), min_size=1, max_size=6))
    def check(batch: list[Request]) -> None:
        texts = detokenizer(name).run(batch)
        assert texts == {request.rid: exact_text(name, request) for request in batch}

    check()


@st.composite
def stopped(draw: Any, name: str) -> Request:
    """A request that ends on a stop string taken from its own text."""
    prompt = draw(st.one_of(st.just([]), id_lists(name)))
    output = draw(
        st.sampled_from(TEXTS).map(lambda text: tokenizer(name).encode(text, add_special_tokens=False))
    )
    skip = draw(st.booleans())
    whole = exact_text(name, Request("", prompt, output, skip_special_tokens=skip))
    start = draw(st.integers(0, max(0, len(whole) - 1)))
    stop = whole[start : start + draw(st.integers(1, 4))]
    if not stop.strip():
        stop = whole.strip()[:2] or whole
    end = next(
        end
        for end in range(1, len(output) + 1)
        if stop in exact_text(name, Request("", prompt, output[:end], skip_special_tokens=skip))
    )
    return Request(
        fresh_rid(f"{name}-stop"),
        prompt,
        output[:end],
        {"type": "stop", "matched": stop},
        skip_special_tokens=skip,
        no_stop_trim=draw(st.booleans()),
        stop=(stop,),
        per_step=draw(st.sampled_from([1, 2])),
    )


_CODECS: dict[tuple[str, bool], Codec] = {}


def streamed_before_the_end(name: str, request: Request, rows: list[list[Row]]) -> str:
    """What the client has before the request's last message: puredetok's text of the ids sent
    until then (it is certain: a prefix of the text of every continuation)."""
    mine = [row for batch in rows for row in batch if row.rid == request.rid]
    if len(mine) == 1:
        return ""
    key = (name, request.skip_special_tokens)
    if key not in _CODECS:
        _CODECS[key] = codec_for(tokenizer(name), skip_special_tokens=request.skip_special_tokens)
    window = list(request.prompt[-PROMPT_WINDOW:])
    state = start(_CODECS[key], window)
    _, text = feed(state, request.output[: len(request.output) - len(mine[-1].decode_ids)])
    return text


def trimmed(name: str, request: Request) -> str:
    """SGLang's trim of the whole text: before the stop string's first occurrence, or through it
    with ``no_stop_trim``."""
    text = exact_text(name, request)
    stop = str(request.finished_reason["matched"]) if request.finished_reason else ""
    at = text.find(stop)
    return text[: at + len(stop)] if request.no_stop_trim else text[:at]


@pytest.mark.parametrize("name", ("qwen3", "llama2"))
def test_a_matched_stop_string_is_trimmed_as_sglang_trims_it(name: str) -> None:
    """The client's text is the whole text trimmed at the stop string, as SGLang trims it. Text
    already sent stays sent: where the scheduler let text past the stop's start go out before the
    stop was complete (its hold-back test reads the tail's text, where a split character is not
    the start of a stop string), the client keeps it and gets nothing more."""

    @given(st.lists(stopped(name), min_size=1, max_size=4))
    def check(batch: list[Request]) -> None:
        decode = decoder(name)
        rows = list(iterations(batch, decode))
        texts = detokenizer(name).run(batch, decode)
        expected = {}
        for request in batch:
            sent, final = streamed_before_the_end(name, request, rows), trimmed(name, request)
            expected[request.rid] = sent + final[len(sent) :]
        assert texts == expected

    check()


@pytest.mark.parametrize("name", ("qwen3", "llama2"))
def test_a_matched_stop_token_is_left_out_unless_no_stop_trim(name: str) -> None:
    eos = tokenizer(name).eos_token_id

    @given(st.lists(st.tuples(id_lists(name), st.booleans(), st.booleans()), min_size=1, max_size=4))
    def check(cases: list[tuple[list[int], bool, bool]]) -> None:
        batch = [
            Request(
                fresh_rid(f"{name}-eos"),
                [],
                [*output, eos],
                {"type": "stop", "matched": eos},
                skip_special_tokens=skip,
                no_stop_trim=no_trim,
            )
            for output, skip, no_trim in cases
        ]
        texts = detokenizer(name).run(batch)
        expected = {
            request.rid: decoder(name, request.skip_special_tokens)(
                request.output if request.no_stop_trim else request.output[:-1]
            )
            for request in batch
        }
        assert texts == expected

    check()


def test_a_finished_request_leaves_nothing_behind() -> None:
    """A request id used again after its request finished (or was aborted) opens a new request:
    its first message's window is a prompt again, not more output of the old one."""
    process, encode = detokenizer("qwen3"), tokenizer("qwen3").encode
    rid = fresh_rid("again")
    prompt, output = encode("Q: why?"), encode(" Because 😀 it is.")
    for reason in ({"type": "length"}, {"type": "abort", "message": "client left"}, {"type": "length"}):
        request = Request(rid, prompt, output, reason, per_step=2)
        assert process.run([request]) == {rid: exact_text("qwen3", request)}


def test_decoded_text_goes_out_first() -> None:
    """``decoded_texts`` (text already decoded before the window, empty from SGLang's scheduler)
    comes first, in the request's first output, as SGLang sends it for a finished request."""
    process = detokenizer("qwen3")
    ids = tokenizer("qwen3").encode(" and more")
    streamed, finished = fresh_rid("decoded"), fresh_rid("decoded")
    first = process.exchange(
        [
            Row(streamed, [40, *ids[:1]], 1, decoded_text="Earlier"),
            Row(finished, [40, *ids], 1, {"type": "length"}, decoded_text="Earlier"),
        ]
    )
    rest = process.exchange([Row(streamed, ids[1:], 1, {"type": "length"})])
    assert first[0] + rest[0] == first[1] == "Earlier" + decoder("qwen3")(ids)


def test_ids_outside_the_vocabulary_are_taken_as_sglang_takes_them() -> None:
    """SGLang maps ids outside the vocabulary (multimodal placeholders in the prompt window) to 0
    before decoding; puredetok does the same, so both processes send the same text.
    """
    from sglang_helpers import OFF

    size = len(tokenizer("llama2"))
    text = tokenizer("llama2").encode(" after the image 😀", add_special_tokens=False)
    requests = [
        Request("placeholder-prompt", [-101, -102, size + 5, 306], text),
        Request("placeholder-output", [306], [*text[:2], size + 7, *text[2:]]),
    ]
    texts = {}
    for label, environment in (("on", {}), ("off", OFF)):
        batch = [Request(f"{r.rid}-{label}-{fresh_rid()}", r.prompt, r.output) for r in requests]
        got = detokenizer("llama2", environment).run(batch)
        texts[label] = [got[request.rid] for request in batch]
    assert texts["on"] == texts["off"]
    assert texts["on"][0] == exact_text("llama2", Request("", [0, 0, 0, 306], text))


def test_multi_tokenizer_worker_mode_sends_each_worker_its_requests_exact_text() -> None:
    """With ``tokenizer_worker_num`` > 1 SGLang's detokenizer runs another event loop, which sends
    each request's output to the tokenizer worker named in its ``http_worker_ipcs``."""
    from sglang_helpers import folder
    from sglang_process import DetokenizerProcess

    encode = tokenizer("llama2").encode
    byte_run = tokenizer("llama2").convert_tokens_to_ids(["<0x6B>", "<0xD2>"])
    with DetokenizerProcess(folder("llama2"), {}, tokenizer_worker_num=2) as process:
        (first, first_socket), (second, second_socket) = process.worker(), process.worker()
        requests = [
            Request("to-first", encode("Q: hi"), encode(" 推理 😀 ok")),
            Request("to-second", [], byte_run, per_step=1),
            Request("to-first-too", encode("Q:"), [*encode(" naïve"), *byte_run]),
        ]
        route = {"to-first": first, "to-second": second, "to-first-too": first}
        texts = {request.rid: "" for request in requests}
        for rows in iterations(requests):
            routed = [Row(**{**vars(row), "http_worker_ipc": route[row.rid]}) for row in rows]
            process.send(token_batch(routed))
            for name, socket in ((first, first_socket), (second, second_socket)):
                mine = [row.rid for row in routed if row.http_worker_ipc == name]
                answered: list[str] = []
                while len(answered) < len(mine):  # its requests in batch order: SGLang 0.5.23 sends
                    # them in one reply, 0.5.22 in one reply each
                    reply = process.receive(900, socket)  # the first waits for the process to start
                    answered += reply.rids
                    for rid, text in zip(reply.rids, reply.output_strs):
                        texts[rid] += text
                assert answered == mine
    assert texts == {request.rid: exact_text("llama2", request) for request in requests}
    assert texts["to-second"] == "\ufffd\ufffd"


@pytest.mark.parametrize("key", ["rid", "tokenizer worker"])
def test_multi_detokenizer_mode_keeps_each_request_on_one_exact_detokenizer(key: str) -> None:
    """With ``detokenizer_worker_num`` > 1 SGLang runs several detokenizer processes behind its
    ``MultiDetokenizerRouter``, which splits each batch between them (by the request's tokenizer
    worker, or its id where SGLang stamps no worker): each process decodes its requests with
    puredetok, and every request's text is exact."""
    from sglang_helpers import ROUTES_BY_RID, folder

    if key == "rid" and not ROUTES_BY_RID:
        pytest.skip(f"sglang {VERSION}'s router needs each request's tokenizer worker (it has no rid key)")

    from sglang_process import DetokenizerProcess

    encode = tokenizer("llama2").encode
    byte_run = tokenizer("llama2").convert_tokens_to_ids(["<0xF0>", "<0x9F>", "<0x8C>", "<0xB6>"])
    texts = [" 推理 😀 ok", " naïve café", " Ελληνικά русский", " 🦩 鱻䨻", "\n\nspaces  "]
    requests = [
        Request(
            f"multi-{index}-{fresh_rid()}",
            encode("Q: hi") if index % 2 else [],
            [*encode(texts[index % len(texts)], add_special_tokens=False), *byte_run],
            per_step=1 + index % 3,
        )
        for index in range(12)
    ]
    # eight tokenizer workers: SGLang's router sends four to each detokenizer (crc32 of the name)
    workers = {request.rid: f"ipc://tokenizer-{index % 8}" for index, request in enumerate(requests)}
    got = {request.rid: "" for request in requests}
    replies_per_batch = set()
    with DetokenizerProcess(folder("llama2"), {}, detokenizer_worker_num=2) as process:
        process.wait_ready()
        for rows in iterations(requests):
            if not rows:
                continue
            if key == "tokenizer worker":  # stamped as SGLang's tokenizer workers stamp them
                rows = [Row(**{**vars(row), "http_worker_ipc": workers[row.rid]}) for row in rows]
            process.send(token_batch(rows))
            sent, answered, replies = [row.rid for row in rows], [], 0
            while len(answered) < len(sent):  # each detokenizer replies with its part, in order
                reply = process.receive()
                replies += 1
                part = list(reply.rids)
                assert part == [rid for rid in sent if rid in set(part)]
                answered += part
                for rid, text in zip(reply.rids, reply.output_strs):
                    got[rid] += text
            assert sorted(answered) == sorted(sent)
            replies_per_batch.add(replies)
    assert 2 in replies_per_batch  # the batches were split between the two processes
    assert got == {request.rid: exact_text("llama2", request) for request in requests}
    assert all(text.endswith("🌶") for text in got.values())
