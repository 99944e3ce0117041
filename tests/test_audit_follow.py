"""A request compared as it streams (audit/follow.py) reports exactly what the comparison of the
whole texts reports: the same verdict, offset, token, kind, windows, lengths and chunk, for
streams of any cut, with stop strings, stop tokens and every kind of wrong text; and a vLLM
stream read ahead and followed gives the report that reading it whole gives.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import tokenizer, vocabulary
from puredetok.audit import AuditOptions, Auditor, Chunk, Request
from puredetok.audit.compare import Difference
from puredetok.audit.follow import Followed, Follower
from puredetok.audit.trace import read_trace_requests
from puredetok.audit.vllm import read_stream
from puredetok.testing.strategies import prompt_ids, text_ids, token_ids

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


@given(data=st.data())
@settings(  # each example replays a whole trace twice (~1.8 s): bounded so that CI stays within its time
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
    for item in read_trace_requests(numbered, tok, "f"):
        assert not isinstance(item, Followed)
        whole.append(item if not isinstance(item, Request) else (item.id, item.line, auditor.check(item)))
    followed = list(read_trace_requests(numbered, tok, "f", None, auditor))
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
