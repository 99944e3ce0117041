"""A request compared as it streams (audit/_follow.py) reports exactly what the comparison of the
whole texts reports: the same verdict, offset, token, kind, windows, lengths and chunk, for
streams of any cut, with stop strings, stop tokens and every kind of wrong text; and a vLLM
stream read ahead and followed gives the report that reading it whole gives.
"""

from __future__ import annotations

import functools
import json
import tracemalloc
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import puredetok
from helpers import tokenizer, vocabulary
from puredetok.testing.strategies import prompt_ids, text_ids, token_ids
from puredetok_audit import AuditOptions, Auditor, Chunk, Request
from puredetok_audit._compare import Difference
from puredetok_audit._follow import Followed, Follower
from puredetok_audit._formats.sglang import read_stream as sglang_stream
from puredetok_audit._formats.trace import read_trace_requests
from puredetok_audit._formats.vllm import read_stream

NAMES = ("qwen3", "llama2", "t5_small")
MUTATIONS = ("none", "untrimmed", "cut", "replace", "duplicate", "space", "stop", "tail", "other")
FIELDS = ("kind", "offset", "token", "exact", "engine", "exact_length", "engine_length", "chunk")


@functools.cache
def _auditor(name: str, include: bool, context: int) -> Auditor:
    options = AuditOptions(include_stop_str_in_output=include, context=context)
    return Auditor(tokenizer(name), options)


def _cuts(data: st.DataObject, size: int, count: int) -> list[int]:
    return sorted(data.draw(st.lists(st.integers(0, size), min_size=count - 1, max_size=count - 1)))


@st.composite
def _ids(draw: st.DrawFn, name: str) -> list[int]:
    vocab = vocabulary(name)
    ids = draw(st.one_of(text_ids(vocab), token_ids(vocab)))
    return ids * draw(st.sampled_from([1, 1, 3, 30, 120]))


def _mutate(data: st.DataObject, exact: str, untrimmed: str, stop: str | None) -> str:
    mutation = data.draw(st.sampled_from(MUTATIONS))
    at = data.draw(st.integers(0, len(exact)))
    if mutation == "untrimmed":
        return untrimmed
    if mutation == "cut":
        return exact[:at]
    if mutation == "replace" and at < len(exact):
        return exact[:at] + "\ufffd" + exact[at + 1 :]
    if mutation == "duplicate":
        start = data.draw(st.integers(max(0, at - 300), at))
        return exact[:at] + exact[start:at] + exact[at:]
    if mutation == "space":
        return exact[:at] + " " + exact[at:]
    if mutation == "stop" and stop is not None:
        return exact + stop if data.draw(st.booleans()) else exact.removesuffix(stop)
    if mutation == "tail":
        return exact + data.draw(st.text(alphabet="a \ufffd", max_size=5))
    if mutation == "other" and at < len(exact):
        return exact[:at] + "#" + exact[at:] + "x"
    return exact


@st.composite
def _case(draw: st.DrawFn, name: str) -> dict[str, Any]:
    """A streamed request: its prompt, ids, ending and include option, and chunks whose texts are
    the exact text mutated one way or none, cut anywhere (the ids cut elsewhere)."""
    data = draw(st.data())
    prompt = draw(st.one_of(st.just([]), prompt_ids(vocabulary(name))))
    ids = draw(_ids(name))
    include, context = draw(st.booleans()), draw(st.sampled_from([0, 3, 20]))
    auditor = _auditor(name, include, context)
    untrimmed = auditor.text_of(auditor.codec(Request("r", 1, (), (), "")), tuple(prompt), tuple(ids))
    ending = draw(st.sampled_from(["length", "string", "token"]))
    stop: str | None = None
    if ending == "string":
        if untrimmed and draw(st.booleans()):
            at = draw(st.integers(0, len(untrimmed) - 1))
            stop = untrimmed[at : at + draw(st.integers(1, 6))]
        else:
            stop = draw(st.sampled_from(["\n\n", "zz", " "]))
    finish = "length" if ending == "length" else "stop"
    head = Request("r", 1, tuple(prompt), tuple(ids), "", finish, stop, ending == "token")
    exact, _ = auditor.exact(head)
    text = _mutate(data, exact, untrimmed, stop)
    count = draw(st.integers(1, 8))
    id_cuts, text_cuts = _cuts(data, len(ids), count), _cuts(data, len(text), count)
    id_pieces = [ids[a:b] for a, b in zip([0, *id_cuts], [*id_cuts, len(ids)])]
    texts = [text[a:b] for a, b in zip([0, *text_cuts], [*text_cuts, len(text)])]
    return {
        "auditor": auditor,
        "head": head,
        "chunks": list(zip(id_pieces, texts)),
        "stops": draw(st.permutations([stop or "", *draw(st.lists(st.sampled_from(["1", "\n", "ab"])))])),
        "step": draw(st.sampled_from([1, 7, 4096])),
        "limit": draw(st.sampled_from([5, 300, 1 << 16])),
    }


def _whole(case: dict[str, Any]) -> Difference | None:
    head, pieces = case["head"], case["chunks"]
    chunks = tuple(Chunk(text, len(ids)) for ids, text in pieces)
    text = "".join(text for _, text in pieces)
    request = attrs.evolve(head, text=text, chunks=chunks)
    difference: Difference | None = case["auditor"].check(request)
    return difference


def _followed(case: dict[str, Any]) -> Followed:
    auditor, head = case["auditor"], case["head"]
    codec = auditor.codec(head)
    follower = Follower(
        codec, head.prompt_ids, case["stops"], auditor.include_stop(head), auditor.options.context,
        step=case["step"], limit=case["limit"],
    )  # fmt: skip
    for ids, text in case["chunks"]:
        follower.add(ids, text)
    return follower.end(
        Request(head.id, head.line, (), (), "", head.finish_reason, head.stop, head.stop_token)
    )


def _same(whole: Difference | None, followed: Followed) -> None:
    assert followed.error is None
    found = followed.difference
    assert (whole is None) == (found is None)
    if whole is None or found is None:
        return
    if found.looked is not None and whole.kind in ("cleanup spacing", "duplicated text", "other"):
        fields = [field for field in FIELDS if field != "kind"]  # those two kinds looked for in part
        assert found.kind in ("cleanup spacing", "duplicated text", "other")
    else:
        fields = list(FIELDS)
    assert {f: getattr(found, f) for f in fields} == {f: getattr(whole, f) for f in fields}


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None)
def test_the_comparison_as_it_streams_is_the_whole_one(name: str, data: st.DataObject) -> None:
    case = data.draw(_case(name))
    _same(_whole(case), _followed(case))


def test_a_long_stream_past_the_limit_says_what_it_looked_at() -> None:
    auditor = _auditor("qwen3", False, 20)
    ids = tokenizer("qwen3").encode("a b c " * 200)
    exact = auditor.text_of(auditor.codec(Request("r", 1, (), (), "")), (), tuple(ids))
    text = exact[:10] + " " + exact[10:]
    head = Request("r", 1, (), tuple(ids), "")
    case = {"auditor": auditor, "head": head, "chunks": [(ids, text)], "stops": ()}
    whole = _whole(case)
    assert whole is not None and whole.kind == "cleanup spacing"
    found = _followed({**case, "step": 4096, "limit": 1000}).difference
    assert found is not None and found.looked == 1000 and found.offset == whole.offset
    _same(whole, _followed({**case, "step": 4096, "limit": 1 << 16}))


def _sse(
    uid: str, prompt: list[int], pieces: list[tuple[list[int], str]], end: dict[str, Any]
) -> list[bytes]:
    lines = []
    for index, (ids, text) in enumerate(pieces):
        choice: dict[str, Any] = {"index": 0, "text": text, "token_ids": ids, "finish_reason": None}
        if index == 0:
            choice["prompt_token_ids"] = prompt
        if index == len(pieces) - 1:
            choice.update(end)
        lines.append(f"data: {json.dumps({'id': uid, 'choices': [choice]})}".encode())
    return [*lines, b"data: [DONE]"]


@given(data=st.data())
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None)
def test_a_vllm_stream_read_ahead_and_followed_gives_the_whole_report(data: st.DataObject) -> None:
    """Several streams in one file (one uid used twice, one stream never ended): read whole and
    checked, or read ahead for their endings and followed, the same findings."""
    lines: list[bytes] = []
    for uid in data.draw(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=3)):
        case = data.draw(_case("qwen3"))
        head = case["head"]
        end: dict[str, Any] = {"finish_reason": head.finish_reason}
        if head.stop is not None:
            end["stop_reason"] = head.stop
        elif head.stop_token:
            end["stop_reason"] = head.output_ids[-1] if head.output_ids else None
        if data.draw(st.integers(0, 4)) == 0:
            end = {}  # it ends at [DONE], or at the end of the input
        stream = _sse(uid, list(head.prompt_ids), case["chunks"], end)
        lines += stream[:-1] if data.draw(st.integers(0, 4)) == 0 else stream
    numbered = list(enumerate(lines, 1))
    auditor = _auditor("qwen3", False, 20)
    whole = []
    for item in read_stream(numbered, "f"):
        assert isinstance(item, Request)
        whole.append((item.id, item.line, auditor.check(item)))
    followed = list(read_stream(numbered, "f", auditor, numbered))
    assert [(f.request.id, f.request.line) for f in followed if isinstance(f, Followed)] == [
        (uid, line) for uid, line, _ in whole
    ]
    for (_, _, difference), item in zip(whole, followed):
        assert isinstance(item, Followed)
        _same(difference, item)


@pytest.mark.parametrize("count", [2, 3])
def test_a_stop_string_longer_than_the_text_searched_last_is_found(count: int) -> None:
    """A hypothesis seed found it: the follower searched its last 2 characters ('กา') at the end,
    kept 1 of them for the search with the tail, and missed the 4-character stop string that the
    tail ('กา') completed, so the trimmed request was reported as a stop-trimming difference."""
    auditor = _auditor("qwen3", False, 20)
    vocab = vocabulary("qwen3")
    assert vocab.chat is not None
    event: dict[str, Any] = {"uid": 0, "tokens": [125111] * count, "prompt": vocab.chat(""), "finished": True}
    event["options"] = {"stop": ["กากา"], "include_stop_str_in_output": False}  # 'กา' per id
    numbered = [(1, json.dumps(event).encode())]
    codecs, tok = auditor.replay_codecs, tokenizer("qwen3")
    [request] = read_trace_requests(numbered, tok, "f", codecs)
    assert isinstance(request, Request)
    whole = auditor.check(request)
    [followed] = read_trace_requests(numbered, tok, "f", codecs, auditor)
    assert isinstance(followed, Followed) and whole is None
    _same(whole, followed)


@given(data=st.data())
@settings(  # each example replays a whole trace twice (each replay's manager reads the vocabulary): bounded
    max_examples=30, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None
)
def test_a_trace_replayed_and_followed_gives_the_whole_report(data: st.DataObject) -> None:
    """Requests of a trace (interleaved, with stop strings that end them early, ids after their
    end, aborts, some never finished): checked whole after the replay, or followed as it runs."""
    auditor = _auditor("qwen3", False, 20)
    vocab = vocabulary("qwen3")
    lines: list[bytes] = []
    events: list[tuple[int, dict[str, Any]]] = []
    for uid in range(data.draw(st.integers(1, 3))):
        ids = data.draw(_ids("qwen3"))
        text = auditor.text_of(auditor.codec(Request("r", 1, (), (), "")), (), tuple(ids))
        stops = []
        if text and data.draw(st.booleans()):
            at = data.draw(st.integers(0, len(text) - 1))
            stops.append(text[at : at + data.draw(st.integers(1, 4))])
        options = {"stop": stops, "include_stop_str_in_output": data.draw(st.booleans())}
        cuts = _cuts(data, len(ids), data.draw(st.integers(1, 6)))
        pieces = [ids[a:b] for a, b in zip([0, *cuts], [*cuts, len(ids)])]
        for index, piece in enumerate(pieces):
            event: dict[str, Any] = {"uid": uid, "tokens": piece}
            if index == 0:
                event.update(prompt=data.draw(prompt_ids(vocab)), options=options)
            if index == len(pieces) - 1:
                event.update(data.draw(st.sampled_from([{"finished": True}, {"abort": True}, {}])))
            events.append((uid, event))
    order = data.draw(st.permutations(range(len(events))))
    firsts = sorted(order, key=lambda k: (events[k][0], k))  # each uid's events in their order
    by_uid: dict[int, list[int]] = {}
    for k in firsts:
        by_uid.setdefault(events[k][0], []).append(k)
    queue = {uid: iter(ks) for uid, ks in by_uid.items()}
    lines = [json.dumps(events[next(queue[events[k][0]])][1]).encode() for k in order]
    numbered = list(enumerate(lines, 1))
    tok = tokenizer("qwen3")
    whole = []
    codecs = auditor.replay_codecs  # as the audit replays its traces: codecs built once, not per replay
    for item in read_trace_requests(numbered, tok, "f", codecs):
        assert not isinstance(item, Followed)
        whole.append(item if not isinstance(item, Request) else (item.id, item.line, auditor.check(item)))
    followed = list(read_trace_requests(numbered, tok, "f", codecs, auditor))
    assert len(followed) == len(whole)
    for before, item in zip(whole, followed):
        if isinstance(before, tuple):
            assert isinstance(item, Followed) and (item.request.id, item.request.line) == before[:2]
            _same(before[2], item)
        else:
            assert item == before


def test_two_stop_strings_close_together_keep_what_the_first_needs() -> None:
    """A request with two stop strings a character apart: the one that cuts the exact text comes
    first, the other starts its own place to keep; the first's windows are still there."""
    auditor = _auditor("qwen3", False, 20)
    ids = tokenizer("qwen3").encode("x" * 50 + "a.\nb " + "y" * 900)
    head = Request("r", 1, (), tuple(ids), "", "stop", ".")
    exact, untrimmed = auditor.exact(head)
    for text in (untrimmed, untrimmed[:60] + "Z" + untrimmed[61:], exact + ".\nb"):
        for step in (1, 4096):
            chunks = [(ids[:5], ""), (ids[5:], text)]
            case = {"auditor": auditor, "head": head, "chunks": chunks, "stops": [".", "\n"], "step": step}
            _same(_whole(case), _followed({**case, "limit": 5}))


SGLANG_SERVERS = ("whole", "new", "new-ids")
"""SGLang's stream modes: everything so far (the default), new ids and text
(``--incremental-streaming-output``), new ids and the text so far (older ``--stream-output``)."""


def _sglang_lines(
    uid: str,
    prompt: list[int],
    pieces: list[tuple[list[int], str | None]],
    server: str,
    counts: bool,
    end: Any,
) -> list[bytes]:
    """A request's chunks as ``server`` streams them (``pieces``: each chunk's new ids and new
    text, a text of None taken back: the text so far with a U+FFFD, corrected by the next)."""
    lines, ids, text = [], [], ""
    for index, (new_ids, new_text) in enumerate(pieces):
        ids += new_ids
        shown = text + "\ufffd" if new_text is None else text + new_text
        text = text if new_text is None else shown
        meta: dict[str, Any] = {"id": uid, "finish_reason": end if index == len(pieces) - 1 else None}
        if counts:
            meta["completion_tokens"] = len(ids)
        chunk: dict[str, Any] = {
            "text": shown[len(shown) - len(new_text or "\ufffd") :] if server == "new" else shown,
            "output_ids": ids if server == "whole" else new_ids,
            "meta_info": meta,
        }
        if index == 0:
            chunk["input_ids"] = prompt
        lines.append(f"data: {json.dumps(chunk, ensure_ascii=False)}".encode())
    return [*lines, b"data: [DONE]"]


@st.composite
def _sglang_request(draw: st.DrawFn, uid: str) -> list[bytes]:
    """One request in one server's mode: a generated case (wrong texts of every kind, stops), or
    a stream of new texts each the same (``"ab"``, ``"ab"``: it reads both ways), some chunks'
    texts taken back, with or without ``completion_tokens``, ended by its finish reason or not."""
    case = draw(_case("qwen3"))
    head, pieces = case["head"], [(list(ids), text) for ids, text in case["chunks"]]
    if draw(st.integers(0, 3)) == 0 and head.output_ids:  # the same text in every chunk
        ids, count = list(head.output_ids), draw(st.integers(2, 3))
        whole = _auditor("qwen3", False, 20).text_of(case["auditor"].codec(head), head.prompt_ids, tuple(ids))
        piece = whole[: len(whole) // count] if draw(st.booleans()) else draw(st.sampled_from(["ab", whole]))
        pieces = [(ids if k == 0 else [], piece) for k in range(count)]
        head = attrs.evolve(head, finish_reason="length", stop=None, stop_token=False)
    for at in draw(st.lists(st.integers(0, len(pieces) - 1), max_size=2)):
        pieces.insert(at, ([], None))
    end: dict[str, Any] | None = {"type": "length", "length": len(head.output_ids)}
    if head.stop is not None:
        end = {"type": "stop", "matched": head.stop}
    elif head.stop_token:
        end = {"type": "stop", "matched": head.output_ids[-1] if head.output_ids else 0}
    if draw(st.integers(0, 4)) == 0:
        end = None  # it ends at [DONE], or at the end of the input
    server, counts = draw(st.sampled_from(SGLANG_SERVERS)), draw(st.integers(0, 3)) > 0
    stream = _sglang_lines(uid, list(head.prompt_ids), pieces, server, counts, end)
    return stream[:-1] if draw(st.integers(0, 4)) == 0 else stream


@given(data=st.data())
@settings(  # each example reads a few streams three times: bounded so that CI stays within its time
    max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None
)
def test_an_sglang_stream_read_ahead_and_followed_gives_the_whole_report(data: st.DataObject) -> None:
    """Several SGLang streams in one file, of every server's mode (one uid used twice, some never
    ended): read whole and checked, or read ahead and followed (held whole where a text is taken
    back), the same findings."""
    lines: list[bytes] = []
    for uid in data.draw(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=3)):
        lines += data.draw(_sglang_request(uid))
    numbered = list(enumerate(lines, 1))
    auditor = _auditor("qwen3", False, 20)
    whole = list(sglang_stream(numbered, "f"))
    followed = list(sglang_stream(numbered, "f", auditor, numbered))
    assert len(followed) == len(whole)
    for before, item in zip(whole, followed):
        assert isinstance(before, Request)
        if isinstance(item, Request):
            event("held whole")
            assert item == before
            continue
        assert isinstance(item, Followed) and (item.request.id, item.request.line) == (before.id, before.line)
        event(f"followed: {'differs' if item.difference else 'equal'}, either: {before.either}")
        assert (item.request.token_count, item.request.chunk_count) == (
            before.token_count,
            before.chunk_count,
        )
        _same(auditor.check(before), item)


@pytest.mark.parametrize(("server", "sizes", "growth"), [("new", (800, 3200), 1.5), ("whole", (200, 800), 6),
                                                        ("new-ids", (200, 800), 6)])  # fmt: skip
def test_an_sglang_stream_is_followed_in_memory_of_one_chunk(
    server: str, sizes: tuple[int, int], growth: float
) -> None:
    """One request of one-id chunks in each server's mode is followed, its memory that of one
    line: flat for new ids and texts; for the modes whose lines hold everything so far, growing as
    a line does (held whole, as the square: the texts of every chunk, 11 and 16 times)."""
    codec = _auditor("qwen3", False, 20).codec(Request("r", 1, (), (), ""))
    base = tokenizer("qwen3").encode("The cat sat on the mat, and the dog lay by the door. ")

    def peak(count: int) -> int:
        ids = (base * (count // len(base) + 1))[:count]
        state = puredetok.start(codec)
        pieces: list[tuple[list[int], str | None]] = []
        for index, token in enumerate(ids):
            state, text = puredetok.step(state, token)
            pieces.append(([token], text + (puredetok.finish(state) if index == count - 1 else "")))
        end = {"type": "length", "length": count}
        numbered = list(enumerate(_sglang_lines("g", [], pieces, server, True, end), 1))
        tracemalloc.start()
        try:
            (found,) = sglang_stream(numbered, "f", _auditor("qwen3", False, 20), numbered)
            assert isinstance(found, Followed) and found.difference is None and found.error is None
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = sizes
    assert peak(large) < growth * peak(small)


def test_an_sglang_stream_that_reads_both_ways_is_equal_in_the_other_reading() -> None:
    """New ids, and new texts that each begin with the one before (``"ab"``, ``"ab"``): read as
    texts so far (most begin with the one before) it differs, read as new texts it is exact;
    followed in both readings, it is reported equal, as the whole check does."""
    auditor = _auditor("qwen3", False, 20)
    ids = tokenizer("qwen3").encode("abab")
    lines = _sglang_lines("g", [], [(ids, "ab"), ([], "ab")], "new", True, {"type": "length"})
    numbered = list(enumerate(lines, 1))
    (whole,) = sglang_stream(numbered, "f")
    assert isinstance(whole, Request) and whole.cumulative and whole.either
    assert auditor.check(attrs.evolve(whole, either=False)) is not None and auditor.check(whole) is None
    (followed,) = sglang_stream(numbered, "f", auditor, numbered)
    assert isinstance(followed, Followed) and (followed.difference, followed.error) == (None, None)
