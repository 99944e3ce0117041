"""DetokenizeManager: many requests per batch, each exactly the pure layers' text."""

from __future__ import annotations

import pickle
import random
from collections.abc import Callable, Sequence
from typing import Any, cast

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers import byte_ids, continuation, forged, id_lists, reference, tokenizer
from puredetok import feed, finish, start
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._messages import (
    UNKNOWN_REQUEST,
    DetokenizeBatch,
    DetokenizeMsg,
    FinishKind,
    Opening,
    SamplingParams,
    Uid,
    UserReply,
)
from puredetok.stops import advance_many, close, open_stream
from sources import EXTRA, FALLBACKS, source
from stop_reference import expected


def manager(name: str = "qwen3", remember_ended: int = 65_536) -> DetokenizeManager:
    """A fresh manager of a source (tests/sources.py: a real tokenizer, the spaces family or a
    fallback); codecs are shared by all managers of a source, so this is cheap."""
    return source(name).manager(remember_ended=remember_ended)


def pure_text(name: str, prompt: Sequence[int], ids: Sequence[int], params: SamplingParams) -> str:
    """What the pure layers give for the whole request at once."""
    m = manager(name)
    stream = open_stream(
        m.codec(params.skip_special_tokens, params.clean_up_tokenization_spaces), m.rules(params), prompt
    )
    stream, text = advance_many(stream, ids)
    stream, tail = close(stream)
    return text + tail


def encode(text: str, name: str = "qwen3") -> list[int]:
    return list(tokenizer(name).encode(text, add_special_tokens=False))


@st.composite
def requests(draw: st.DrawFn, name: str) -> list[tuple[list[int], list[int], SamplingParams, bool]]:
    """A few requests: (prompt, ids, params, explicit opening)."""
    src = source(name)
    out = []
    for _ in range(draw(st.integers(1, 4))):
        ids = draw(src.ids(30))
        prompt = draw(src.ids(8))
        text = src.decode(ids, False) or "x"
        spans = st.tuples(st.integers(0, len(text) - 1), st.integers(1, 4))
        stops = [text[a : a + size] for a, size in draw(st.lists(spans, max_size=2))]
        params = SamplingParams(
            skip_special_tokens=draw(st.booleans()),
            stop=tuple(stops) if draw(st.booleans()) else (),
            ignore_eos=draw(st.booleans()),
            max_new_tokens=draw(st.none() | st.integers(1, 40)),
        )
        explicit = draw(st.booleans())
        if not explicit:
            prompt, params = [], SamplingParams()
        out.append((prompt, ids, params, explicit))
    return out


MANAGED = ["qwen3", "gpt2", "llama2", "t5_small", "distilbert_base_uncased", *EXTRA]
"""Real tokenizers of every family, the spaces family and the fallback codecs (tests/sources.py)."""


def test_managers_of_the_extra_sources_use_their_codecs() -> None:
    for skip in (False, True):
        assert manager("spaces").codec(skip).family == "spaces"
        for label in FALLBACKS:
            assert manager(label).codec(skip).family == "window", label


@pytest.mark.parametrize("name", MANAGED)
@settings(max_examples=max(5, settings().max_examples // 5))
@given(data=st.data())
def test_interleaved_batches_give_each_request_its_pure_text(name: str, data: st.DataObject) -> None:
    """Interleaved, in random batches and chunks: each request gets the stop layer's text for its
    ids at once, which is the plain reference's (decode cut at its stop, contract C)."""
    src = source(name)
    reqs = data.draw(requests(name))
    pending: list[list[DetokenizeMsg]] = []
    for i, (prompt, ids, params, explicit) in enumerate(reqs):
        cuts = sorted(data.draw(st.lists(st.integers(0, len(ids)), max_size=4)))
        chunks = [ids[a:b] for a, b in zip([0, *cuts], [*cuts, len(ids)])]
        opening = Opening(tuple(prompt), params) if explicit else Opening()
        pending.append(
            [
                DetokenizeMsg(i, tuple(chunk), n == len(chunks) - 1, opening if n == 0 else None)
                for n, chunk in enumerate(chunks)
            ]
        )
    queue: list[DetokenizeMsg] = []
    while any(pending):
        i = data.draw(st.sampled_from([i for i, msgs in enumerate(pending) if msgs]))
        queue.append(pending[i].pop(0))
    m = manager(name)
    texts = {i: "" for i in range(len(reqs))}
    ended: set[Uid] = set()
    while queue:
        cut = data.draw(st.integers(1, len(queue)))
        batch, queue = queue[:cut], queue[cut:]
        replies = m.handle(batch)
        assert [r.uid for r in replies] == [msg.uid for msg in batch]
        for reply in replies:
            if reply.uid in ended:
                assert (
                    reply.error is not None
                    and "already ended" in reply.error
                    and reply.incremental_output == ""
                )
                continue
            assert reply.error is None
            texts[int(reply.uid)] += reply.incremental_output
            if reply.finished:
                ended.add(reply.uid)
    assert len(m) == 0
    for i, (prompt, ids, params, _) in enumerate(reqs):
        skip = params.skip_special_tokens
        assert texts[i] == pure_text(name, prompt, ids, params)
        assert texts[i] == expected(src, skip, ids, m.rules(params), prompt)[0]
        if not params.stop and params.ignore_eos and params.max_new_tokens is None:
            state, text = feed(start(src.codec(skip), prompt), ids)
            assert texts[i] == text + finish(state)
            assert texts[i] == src.continuation(prompt, ids, skip)
            if not prompt:
                assert texts[i] == src.decode(ids, skip)


@pytest.mark.parametrize("name", MANAGED)
@settings(max_examples=max(5, settings().max_examples // 5))
@given(data=st.data())
def test_limits_and_an_abort_midway(name: str, data: st.DataObject) -> None:
    """A request with max_new_tokens and min_tokens set, its ids sent up to a point: it ends by
    its limit with the reference's text, or an abort then sends nothing held, forgets it, and a
    late message for it is refused; what it sent is a prefix of the whole request's text."""
    src = source(name)
    ids, prompt = data.draw(src.ids(30)), data.draw(src.ids(8))
    limit = data.draw(st.none() | st.integers(1, 40))
    params = SamplingParams(
        skip_special_tokens=data.draw(st.booleans()),
        max_new_tokens=limit,
        min_tokens=data.draw(st.integers(0, min(3, limit or 3))),
        stop=tuple(data.draw(st.lists(st.sampled_from(["a", "e", " ", "\n", "</s>"]), max_size=2))),
    )
    cut = data.draw(st.integers(0, len(ids)))
    m = manager(name)
    [first] = m.handle([DetokenizeMsg("r", tuple(ids[:cut]), False, Opening(tuple(prompt), params))])
    assert first.error is None
    rules, skip = m.rules(params), params.skip_special_tokens
    so_far, reason = expected(src, skip, ids[:cut], rules, prompt)
    whole, _ = expected(src, skip, ids, rules, prompt)
    assert whole.startswith(first.incremental_output)
    if first.finished:  # its limit, EOS or a stop string ended it
        assert (first.incremental_output, first.finish_reason) == (so_far, reason.kind)
        assert first.finish_reason in ("length", "stop") and len(m) == 0
        return
    assert so_far.startswith(first.incremental_output)
    [aborted] = m.abort(["r"])
    assert aborted == UserReply("r", "", True, "abort") and len(m) == 0
    [late] = m.handle([DetokenizeMsg("r", tuple(ids[cut:]), True)])
    assert late.error is not None and late.incremental_output == "" and len(m) == 0


def test_detokenize_gives_one_text_per_message_in_order() -> None:
    ids = [100024, 119, 128237, 119, 123918, 102, 374, 8848, 11, 46602, 101, 21887, 94880, 586]
    m = manager()
    m.open("spec")
    deltas = [m.detokenize([DetokenizeMsg("spec", (token,))])[0] for token in ids]
    assert deltas == ["", "鱻", "", "䨻", "", "🦩", " is", " rare", ",", " ", "推", "理", " naï", "ve"]
    assert m.detokenize([DetokenizeMsg("spec", (), True)]) == [""]
    assert len(m) == 0


def test_spec_vector_streams_exactly_and_leaves_no_state() -> None:
    text = "推理引擎 😀 streams text: naïve café, 1+1=2.\n第二行结束。"
    ids = encode(text)
    m = manager()
    replies = m.handle(
        [DetokenizeMsg(1, (t,), i == len(ids) - 1, Opening() if i == 0 else None) for i, t in enumerate(ids)]
    )
    assert "".join(r.incremental_output for r in replies) == text
    assert not any("\ufffd" in r.incremental_output for r in replies)
    assert replies[-1].finished and replies[-1].finish_reason == "length" and len(m) == 0


def test_mixed_skip_flags_in_one_batch_decode_each_as_asked() -> None:
    """SGLang TODO: the first request's skip_special_tokens was applied to the whole batch."""
    ids = encode("Hi") + [151644] + encode("there") + [151643] + encode("!")
    m = manager()
    batch = [
        DetokenizeMsg(
            uid, tuple(ids), True, Opening((), SamplingParams(skip_special_tokens=skip, ignore_eos=True))
        )
        for uid, skip in enumerate([True, False, True, False])
    ]
    texts = m.detokenize(batch)
    assert texts == [reference("qwen3", ids, skip) for skip in (True, False, True, False)]
    assert texts[0] != texts[1]


def test_codecs_are_built_once_per_options_and_shared() -> None:
    m = manager()
    for uid, skip in enumerate([True, False, True]):
        m.open(uid, Opening((), SamplingParams(skip_special_tokens=skip)))
    assert m.codec(True) is m.codec(True) and m.codec(True) is not m.codec(False)
    assert m.detach(0).decode.codec is m.detach(2).decode.codec


def test_stop_string_split_over_tokens_is_never_streamed() -> None:
    """SGLang 11446 / vLLM 3574: "DEF","G","HI" must not leak before "J" completes "DEFGHIJ"."""
    m = manager()
    opening = Opening((), SamplingParams(stop=("DEFGHIJ",)))
    out = [
        m.handle([DetokenizeMsg(1, tuple(encode(piece)), False, opening if i == 0 else None)])[0]
        for i, piece in enumerate(["DEF", "G", "HI", "J"])
    ]
    assert [r.incremental_output for r in out] == ["", "", "", ""]
    assert out[-1].finished and out[-1].finish_reason == "stop" and out[-1].matched_stop == "DEFGHIJ"
    assert len(m) == 0


def test_eos_ends_the_request_and_is_not_text() -> None:
    m = manager()
    [reply] = m.handle([DetokenizeMsg(1, (*encode("The end."), 151645, *encode("more")), False, Opening())])
    assert reply.incremental_output == "The end." and reply.finished
    assert reply.finish_reason == "stop" and reply.matched_stop == 151645


def test_invalid_ids_are_a_per_request_error_and_nothing_else_is_lost() -> None:
    """vLLM 21951: an id outside the vocabulary crashed the detokenizer."""
    m = manager()
    good = encode("推理 naïve")
    size = m.codec().vocab_size
    batch = [
        DetokenizeMsg(1, (good[0], 2**63 - 1, good[1], size, 10**12, *good[2:]), False, Opening()),
        DetokenizeMsg(2, tuple(good), False, Opening()),
        DetokenizeMsg(3, (size + 5,), False, Opening()),
    ]
    first, second, third = m.handle(batch)
    assert (
        first.error is not None
        and f"{2**63 - 1} at position 1" in first.error
        and f"{size} at position 3" in first.error
    )
    assert first.incremental_output == second.incremental_output and second.error is None
    assert third.error is not None and third.incremental_output == "" and not third.finished
    assert len(m) == 3  # the requests go on; their state is intact
    replies = m.handle([DetokenizeMsg(uid, (), True) for uid in (1, 2, 3)])
    assert first.incremental_output + replies[0].incremental_output == "推理 naïve"
    assert replies[2].error is None and replies[2].finished and len(m) == 0
    # A batch made directly has only its shape checked (its messages refuse a negative id): such an
    # id reaching the manager is still the request's error, and the request goes on.
    direct = DetokenizeBatch((4,), (good[0], -1), (2,), opens=((0, Opening()),))
    [reply] = m.handle_batch(direct).replies()
    assert reply.error is not None and "-1 at position 1" in reply.error and not reply.finished


def test_late_messages_duplicate_openings_and_unknown_aborts_are_errors() -> None:
    """The request lifecycle rule in the manager: a second opening ends the live request with its
    error (its ids cannot be trusted); after the one finished reply, late messages, openings and
    aborts get error replies that are not finished; an abort of a uid never answered ends it."""
    m = manager()
    opening = Opening((), SamplingParams())
    m.handle([DetokenizeMsg("a", (32,), False, opening)])
    [duplicate] = m.handle([DetokenizeMsg("a", (33,), False, opening)])
    assert duplicate.error is not None and "already open" in duplicate.error and duplicate.finished
    assert "a" not in m
    [late] = m.handle([DetokenizeMsg("a", (34,), True)])
    assert late.error is not None and "already ended" in late.error and not late.finished
    m.handle([DetokenizeMsg("b", (32,), False, opening)])
    [done] = m.handle([DetokenizeMsg("b", (34,), True)])
    assert done.incremental_output == "C" and done.finished and done.error is None
    [reopen] = m.handle([DetokenizeMsg("b", (35,), False, opening)])
    assert reopen.error is not None and "already ended" in reopen.error and not reopen.finished
    [again] = m.abort(["b"])
    assert again.error is not None and "already ended" in again.error and not again.finished
    [unknown] = m.abort(["nobody"])
    assert unknown.finished and unknown.finish_reason == "abort" and unknown.error is not None
    [late_after_abort] = m.handle([DetokenizeMsg("nobody", (32,))])
    assert late_after_abort.error is not None and not late_after_abort.finished and len(m) == 0
    with pytest.raises(ValueError, match="already ended"):
        m.open("a")


def test_abort_drops_the_state_and_sends_nothing_held() -> None:
    m = manager()
    emoji = encode("🦩")
    [partial] = m.handle([DetokenizeMsg(1, tuple(emoji[:-1]), False, Opening())])
    assert partial.incremental_output == "" and 1 in m
    [aborted] = m.abort([1])
    assert aborted == UserReply(1, "", True, "abort") and 1 not in m and len(m) == 0


def test_abort_refuses_a_bare_string_and_aborts_nothing() -> None:
    """``abort("xy")`` used to abort 'x' and 'y' and leave 'xy' streaming. A bare str or bytes (or
    an item that is not a uid) is a TypeError, nothing is aborted; any collection works."""
    m = manager()
    for uid in ("xy", "x", "y"):
        m.handle([DetokenizeMsg(uid, (32,), False, Opening())])
    for bad in ("xy", b"xy", bytearray(b"xy"), ["xy", b"x"], [1.5], 7):
        with pytest.raises(TypeError, match="uid"):
            m.abort(bad)  # type: ignore[arg-type]
    assert all(uid in m for uid in ("xy", "x", "y")) and len(m) == 3
    assert m.abort(["xy"]) == [UserReply("xy", "", True, "abort")]
    assert [r.uid for r in m.abort(uid for uid in ("x",))] == ["x"]  # a generator
    assert [r.uid for r in m.abort({"y"})] == ["y"] and len(m) == 0


def test_an_invalid_opening_is_refused_where_it_is_made() -> None:
    """The values an opening would refuse are refused when the record is made, naming the field, so
    they never reach a scheduler; the manager keeps its own checks all the same (a forged record,
    which neither a constructor nor the wire makes, is an error for its request)."""
    makers: list[tuple[Callable[[], object], str]] = [
        (lambda: Opening((-5,)), "prompt_ids"),
        (lambda: SamplingParams(stop=("",)), "stop"),
        (lambda: SamplingParams(max_new_tokens=0), "max_new_tokens"),
        (lambda: SamplingParams(max_tokens=-1), "max_tokens"),
        (lambda: SamplingParams(min_tokens=5, max_new_tokens=2), "min_tokens"),
    ]
    for make, field in makers:
        with pytest.raises(ValueError, match=field):
            make()
    m = manager()
    bad = [
        DetokenizeMsg(1, (32,), False, forged(Opening(), prompt_ids=(-5,))),
        DetokenizeMsg(2, (32,), False, Opening((), forged(SamplingParams(), stop=("",)))),
        DetokenizeMsg(3, (32,), False, Opening((), forged(SamplingParams(), max_new_tokens=0))),
        DetokenizeMsg(4, (32,), False, Opening((), forged(SamplingParams(max_new_tokens=2), min_tokens=5))),
        DetokenizeMsg(5, (32,), False, Opening()),
    ]
    replies = m.handle(bad)
    assert all(r.error is not None for r in replies[:4]) and replies[4].error is None
    assert len(m) == 1


def test_parameters_of_the_wrong_type_are_refused_or_stored_as_tuples() -> None:
    """Lists where the parameters say sequences are stored as tuples; values no rule can be made of
    are refused when made; a forged record of them is an error for its request only, in its reply
    from handle and as ValueError from open."""
    assert SamplingParams(stop=["l"]).stop == ("l",) and SamplingParams(
        stop_token_ids=[13]
    ).stop_token_ids == (13,)
    with pytest.raises(ValueError, match="stop"):
        SamplingParams(stop=cast(Any, [["e"]]))
    m = manager()
    unhashable = forged(SamplingParams(), stop=[["e"]])
    replies = m.handle(
        [
            DetokenizeMsg(1, (9707,), False, Opening((), SamplingParams(stop=["l"]))),
            DetokenizeMsg(2, (9707,), False, Opening((), unhashable)),
            DetokenizeMsg(3, (9707,), False, Opening((), SamplingParams(stop_token_ids=[13]))),
        ]
    )
    assert [(r.incremental_output, r.finish_reason) for r in replies] == [
        ("He", "stop"),
        ("", None),
        ("Hello", None),
    ]
    assert replies[1].error == "request 2 refused: invalid parameters (unhashable type: 'list')"
    assert 2 not in m and 3 in m
    with pytest.raises(ValueError, match="invalid parameters"):
        m.open(4, Opening((), unhashable))
    assert m.handle([DetokenizeMsg(3, (13,))])[0].finish_reason == "stop"


@pytest.mark.parametrize("text", ["Hello world 🌶 is spicy", "สวัสดีครับ", "URGENCY🌶️ 推理"])
def test_a_prompt_ending_inside_a_character_leaks_no_prompt_text(text: str) -> None:
    """vLLM 48853: a prompt ending in a partial UTF-8 character made the first delta the whole prompt."""
    bytes_ = byte_ids("qwen3")
    for ids in (encode(text), [bytes_[b] for b in text.encode()]):
        for split in range(1, len(ids)):
            prompt, rest = ids[:split], ids[split:]
            m = manager()
            opening = Opening(tuple(prompt), SamplingParams(ignore_eos=True))
            replies = m.handle(
                [DetokenizeMsg(1, (t,), False, opening if i == 0 else None) for i, t in enumerate(rest)]
            )
            replies += m.handle([DetokenizeMsg(1, (), True)])
            out = "".join(r.incremental_output for r in replies)
            whole, prompt_text = reference("qwen3", ids), reference("qwen3", prompt)
            stable = prompt_text.rstrip("\ufffd")
            assert whole == stable + out, (split, out)
            assert out == continuation("qwen3", prompt, rest)


def test_capacity_is_not_a_limit_on_live_requests() -> None:
    """SGLang 2812: live state evicted from a capacity-limited map crashed the detokenizer.

    The manager never evicts a live request; only the memory of ended uids is bounded.
    """
    m = manager(remember_ended=8)
    texts = [f"request {i}: 推理 {i * 7} naïve 🦩" for i in range(1000)]
    ids = [encode(t) for t in texts]
    out = [""] * 1000
    for position in range(max(map(len, ids)) + 1):
        batch = [
            DetokenizeMsg(
                i,
                tuple(seq[position : position + 1]),
                position >= len(seq) - 1,
                Opening() if not position else None,
            )
            for i, seq in enumerate(ids)
            if position < len(seq)
        ]
        for reply in m.handle(batch):
            assert reply.error is None
            out[int(reply.uid)] += reply.incremental_output
    assert out == texts and len(m) == 0 and len(m._ended) == 8


def test_a_request_moved_out_and_back_mid_stream_loses_nothing() -> None:
    """SGLang eviction re-init: re-initialising an evicted request dropped text ("ABCD" came out short)."""
    ids = [32, 33, 34, 35]
    params = SamplingParams()
    for cut in range(len(ids) + 1):
        first = manager()
        first.open("r", Opening((), params))
        texts = first.detokenize([DetokenizeMsg("r", (t,)) for t in ids[:cut]])
        parked = pickle.loads(pickle.dumps(first.detach("r")))  # travels without its codec
        assert len(first) == 0 and len(pickle.dumps(parked)) < 200
        second = manager()
        second.attach("r", parked.resume(second.codec_of(params)))
        texts += second.detokenize(
            [DetokenizeMsg("r", (t,), i == len(ids) - cut - 1) for i, t in enumerate(ids[cut:])]
        )
        assert "".join(texts) == "ABCD"


def test_attach_refuses_a_live_uid_and_an_ended_stream() -> None:
    m = manager()
    m.open(1)
    with pytest.raises(ValueError, match="already open"):
        m.attach(1, open_stream(m.codec(), m.rules(SamplingParams())))
    ended, _ = close(open_stream(m.codec()))
    with pytest.raises(ValueError, match="already ended"):
        m.attach(3, ended)
    with pytest.raises(KeyError):
        m.detach(2)


def test_100_000_requests_with_aborts_duplicates_and_unknown_uids_leave_nothing_behind() -> None:
    rng = random.Random(5)
    m = manager()
    vocab = [i for i in range(0, 150_000, 37) if i not in m.eos_token_ids]
    total, next_uid, live = 100_000, 0, list[Uid]()
    errors = replies_count = 0
    opened: set[Uid] = set()

    def opening(uid: Uid) -> Opening | None:
        if uid in opened:
            return None
        opened.add(uid)
        return Opening()

    while next_uid < total or live:
        batch: list[DetokenizeMsg] = []
        aborts: list[Uid] = []
        while next_uid < total and len(live) < 512:
            live.append(next_uid)
            next_uid += 1
        rng.shuffle(live)
        keep = []
        for uid in live[:256]:
            roll = rng.random()
            if roll < 0.05:
                aborts.extend([uid, uid] if roll < 0.01 else [uid])  # sometimes a duplicate abort
            elif roll < 0.25:
                done = DetokenizeMsg(uid, tuple(rng.sample(vocab, 2)), True, opening(uid))
                batch.extend([done, done] if roll < 0.07 else [done])  # sometimes a duplicate finish
            else:
                batch.append(DetokenizeMsg(uid, (rng.choice(vocab),), False, opening(uid)))
                keep.append(uid)
            if 0.5 < roll < 0.51:
                batch.append(DetokenizeMsg(f"unknown-{uid}", (), True))
                aborts.append(f"never-{uid}")
        live = keep + live[256:]
        for reply in m.handle(batch) + m.abort(aborts):
            replies_count += 1
            errors += reply.error is not None
    assert len(m) == 0
    assert replies_count > total and errors > 0
    assert len(m._ended) <= m.remember_ended


_BYTES = byte_ids("qwen3")
PAST_VOCABULARY = 10**9
"""An id no tokenizer here has (an id < 0 is refused where a message is made)."""
ONE_ID = st.one_of(
    st.sampled_from(sorted(_BYTES.values())), st.integers(0, 151_700), st.just(PAST_VOCABULARY)
)
SERVING = SamplingParams(stop=("\n", "e", "好"), min_tokens=2, max_new_tokens=9)
"""Stop strings that match often on random ids, min_tokens and a token limit within the steps."""


@settings(max_examples=max(10, settings().max_examples // 4))
@given(
    steps=st.lists(
        st.lists(
            st.tuples(
                st.integers(0, 5),  # uid
                st.one_of(ONE_ID, st.lists(ONE_ID, max_size=4).map(tuple)),  # one id, or several
                # not finished, or finished by the scheduler (saying why or not; "stop" on the
                # message's last id, or on the EOS id, or on a stop string)
                st.sampled_from([False, True, "length", "abort", "stop", "eos", "string"]),
            ),
            min_size=1,
            max_size=6,
        ),
        max_size=6,
    ),
    params=st.sampled_from([SamplingParams(), SERVING]),
)
# A uid twice in one run, on the two halves of "é": the second must see the first's held byte.
@example(
    steps=[[(1, 13, False), (0, _BYTES[0xC3], False), (0, _BYTES[0xA9], False)]], params=SamplingParams()
)
def test_a_batch_column_by_column_is_its_messages_one_by_one(
    steps: list[list[tuple[int, int | tuple[int, ...], bool | str]]], params: SamplingParams
) -> None:
    """handle_batch on columns (the worker's path: runs of live requests' messages at once, a uid
    twice, an unknown uid, an invalid id or an ending between them) gives what handling each
    message alone gives, in order, errors and endings included; with no parameters and with the
    serving ones."""
    together, alone = manager(), manager()
    for uid in range(5):  # uid 5 is never opened: its messages are errors on both paths
        together.open(uid, Opening((), params))
        alone.open(uid, Opening((), params))
    for step in steps:
        messages = [_message(uid, ids if isinstance(ids, tuple) else (ids,), end) for uid, ids, end in step]
        batch = DetokenizeBatch.of(messages)
        assert (batch.counts is None) == all(len(message.token_ids) == 1 for message in messages)
        replies = together.handle_batch(batch).items
        assert list(replies) == [alone.handle([message])[0] for message in messages]
    assert sorted(together._live) == sorted(alone._live)
    assert together._consumed == alone._consumed


OPENINGS = {
    "open": lambda params: Opening((), params),
    # a prompt ending inside "é" (its first byte), then a space
    "prompt": lambda params: Opening((9707, _BYTES[0xC3]), params),
    "bad prompt": lambda params: forged(Opening((9707,), params), prompt_ids=(9707, -1)),
    "state": lambda params: Opening(state=_handed_back(params), params=params, consumed=2),
    "bad state": lambda params: Opening(state=b"not a state", params=params),
    # lists where the parameters say tuples: taken as tuples, or refused if they cannot be
    "listed stops": lambda params: Opening((), SamplingParams(stop=cast(Any, ["e"]), max_new_tokens=5)),
    "unhashable stop": lambda params: Opening((), forged(SamplingParams(), stop=[["e"]])),
}


def _handed_back(params: SamplingParams) -> bytes:
    """A request's state after two ids, the first byte of "é" last (as a stopping worker hands it)."""
    m = source("qwen3").manager()
    m.open("x", Opening((), params))
    m.handle([DetokenizeMsg("x", (9707, _BYTES[0xC3]))])
    return m.detach("x").to_bytes()


def qwen3_manager(max_live: int, remember_ended: int) -> DetokenizeManager:
    """A fresh Qwen3 manager that holds at most ``max_live`` requests."""
    return source("qwen3").manager(max_live=max_live, remember_ended=remember_ended)


@settings(max_examples=max(10, settings().max_examples // 4))
@given(
    steps=st.lists(
        st.lists(
            st.tuples(
                st.integers(0, 6),  # uid: 0 and 1 are open before the first batch
                st.one_of(ONE_ID, st.lists(ONE_ID, max_size=3).map(tuple)),
                st.sampled_from([False, False, True, "length", "abort", "stop", "eos", "string"]),
                st.sampled_from([None, None, *OPENINGS]),
            ),
            min_size=1,
            max_size=8,
        ),
        max_size=5,
    ),
    params=st.sampled_from([SamplingParams(), SERVING]),
    max_live=st.sampled_from([3, 64]),
    remember_ended=st.sampled_from([1, 100]),
    reversed_opens=st.booleans(),
)
@example(  # uid 2's message comes before its opening: an unknown uid, then an opening
    steps=[[(2, 13, False, None), (2, 13, False, "open"), (3, 13, True, "open")]],
    params=SERVING,
    max_live=64,
    remember_ended=100,
    reversed_opens=False,
)
@example(  # room for one more: the second opening is refused, even though uid 0 ends first
    steps=[[(0, 13, True, None), (2, 13, False, "open"), (3, 13, False, "open")]],
    params=SamplingParams(),
    max_live=3,
    remember_ended=100,
    reversed_opens=False,
)
@example(  # 2 opens at its second message, 3 at its first: 2 is still the older request
    steps=[[(2, 13, False, None), (2, 13, False, "open"), (3, 13, False, "open")]],
    params=SamplingParams(),
    max_live=64,
    remember_ended=1,
    reversed_opens=True,
)
def test_openings_in_a_batch_are_its_messages_one_by_one(
    steps: list[list[tuple[int, int | tuple[int, ...], bool | str, str | None]]],
    params: SamplingParams,
    max_live: int,
    remember_ended: int,
    reversed_opens: bool,
) -> None:
    """Openings in a batch (the manager opens them before its runs) give what handling each message
    alone gives: valid ones, with a prompt or a handed-back state, refused ones (a bad prompt id, a
    state that is not one, parameters of the wrong type, a uid live or ended, past max_live), and
    uids whose messages come before their opening; also when the batch lists its openings out of
    order. The requests are then handed back in the same order with the same counts, and the same
    uids are remembered as ended."""
    together = qwen3_manager(max_live, remember_ended)
    alone = qwen3_manager(max_live, remember_ended)
    for uid in range(2):
        together.open(uid, Opening((), params))
        alone.open(uid, Opening((), params))
    for step in steps:
        messages = []
        for uid, ids, end, opening in step:
            message = _message(uid, ids if isinstance(ids, tuple) else (ids,), end)
            if opening is not None:
                message = msgspec.structs.replace(message, open=OPENINGS[opening](params))
            messages.append(message)
        batch = DetokenizeBatch.of(messages)
        if reversed_opens:
            batch = msgspec.structs.replace(batch, opens=batch.opens[::-1])
        replies = together.handle_batch(batch).items
        assert list(replies) == [alone.handle([message])[0] for message in messages]
    assert together.drain() == alone.drain()
    late = [DetokenizeMsg(uid, (13,)) for uid in range(7)]
    assert together.handle(late) == alone.handle(late)


def _message(uid: int, ids: tuple[int, ...], end: bool | str) -> DetokenizeMsg:
    """A message whose ``end`` is False, True (finished, no reason), a finish reason, or "stop" on
    its last id ("stop"), on the EOS id ("eos") or on a stop string ("string")."""
    if isinstance(end, bool):
        return DetokenizeMsg(uid, ids, end)
    if end == "length":
        return DetokenizeMsg(uid, ids, True, finish_reason="length")
    if end == "abort":
        return DetokenizeMsg(uid, ids, True, finish_reason="abort")
    matched: int | str = {"stop": ids[-1] if ids else 13, "eos": 151645}.get(end, "e")
    return DetokenizeMsg(uid, ids, True, finish_reason="stop", matched_stop=matched)


def test_requests_opened_alike_share_their_first_record() -> None:
    """Records are values: two requests opened with equal parameters and no prompt start from one
    shared record (built once), and each has its own record from its first token on."""
    m = manager()
    first, second = (
        m.open("a", Opening((), SERVING)),
        m.open("b", Opening((), SamplingParams(**_same(SERVING)))),
    )
    assert first is second
    a, b = m.handle([DetokenizeMsg("a", (9707,)), DetokenizeMsg("b", (13,))])
    assert (a.incremental_output, b.incremental_output) == ("Hello", ".")
    after_a, after_b = m.detach("a"), m.detach("b")
    assert after_a is not after_b and after_a == after_b  # each its own record; both one token in


def _same(params: SamplingParams) -> dict[str, Any]:
    """The fields of ``params`` (to build an equal, separate record)."""
    return {
        name: getattr(params, name)
        for name in ("stop", "min_tokens", "max_new_tokens", "stop_token_ids", "ignore_eos")
    }


def test_max_byte_run_per_request_and_as_the_managers_setting() -> None:
    """Codecs are keyed by every codec option: a request's max_byte_run (0: no cap) or the
    manager's own setting."""
    llama = tokenizer("llama2")
    run = [243, 162, 169, 172] * 3  # three flamingos spelled with <0xNN> tokens
    m = DetokenizeManager(llama)
    capped = DetokenizeManager(llama, max_byte_run=4, codecs=m.codecs)

    uids = iter(range(100))

    def texts(manager: DetokenizeManager, params: SamplingParams | None) -> list[str]:
        uid, opening = next(uids), Opening() if params is None else Opening((1,), params)
        first = manager.handle([DetokenizeMsg(uid, tuple(run[:1]), False, opening)])
        rest = manager.handle([DetokenizeMsg(uid, (token,)) for token in run[1:]])
        tail = manager.handle([DetokenizeMsg(uid, (), True)])
        return [reply.incremental_output for reply in first + rest + tail]

    held = [""] * 12 + ["🦩🦩🦩"]
    each = ["", "", "", "🦩"] * 3 + [""]
    assert texts(m, SamplingParams()) == held
    assert texts(m, SamplingParams(max_byte_run=4)) == each
    assert texts(capped, None) == each and texts(capped, SamplingParams()) == each
    assert texts(capped, SamplingParams(max_byte_run=0)) == held  # no cap, whatever the setting
    assert m.codec_of(SamplingParams(max_byte_run=4)) is capped.codec() is m.codec(max_byte_run=4)
    assert m.codec_of(SamplingParams(max_byte_run=4)) != m.codec()
    with pytest.raises(ValueError, match="max_byte_run"):
        DetokenizeManager(llama, max_byte_run=0)
    with pytest.raises(ValueError, match="max_byte_run"):
        SamplingParams(max_byte_run=-2)
    forged_params = forged(SamplingParams(), max_byte_run=-2)
    [bad] = m.handle([DetokenizeMsg("bad", (5,), True, Opening((), forged_params))])
    assert bad.error is not None and "max_byte_run" in bad.error


@pytest.mark.parametrize("name", ["llama2", "mistral_v03", "phi3_mini"])
def test_stop_at_a_newline_after_a_prompt_ending_in_a_newline(name: str) -> None:
    """Contract C through the manager: the prompt's held "\n" (<0x0A>) is neither sent again nor
    matched by stop=["\n"]; the request stops at the output's first newline."""
    prompt = list(tokenizer(name).encode("A story about vLLM:\n"))
    output = encode(" VLLM is great.\nSecond line.", name)
    expected = continuation(name, prompt, output)
    m = manager(name)
    opening = Opening(tuple(prompt), SamplingParams(stop=("\n",)))
    replies = m.handle(
        [DetokenizeMsg(1, (token,), False, opening if i == 0 else None) for i, token in enumerate(output)]
    )
    sent = "".join(reply.incremental_output for reply in replies if reply.error is None)
    assert sent == expected[: expected.index("\n")] and sent.strip()
    ended = [reply for reply in replies if reply.finished]
    assert ended and ended[0].finish_reason == "stop" and ended[0].matched_stop == "\n"


# --- the scheduler's finish reason ------------------------------------------------------------


def test_the_schedulers_reason_reaches_the_reply() -> None:
    m = manager()
    text = encode("Hello there")
    eos = 151645
    replies = m.handle(
        [
            DetokenizeMsg("eos", (*text, eos), True, Opening(), "stop", eos),
            DetokenizeMsg("other-id", tuple(text), True, Opening(), "stop", 7),
            DetokenizeMsg("string", tuple(text), True, Opening(), "stop", "</answer>"),
            DetokenizeMsg("length", tuple(text), True, Opening(), "length"),
            DetokenizeMsg("unsaid", tuple(text), True, Opening()),
        ]
    )
    said = {r.uid: (r.incremental_output, r.finish_reason, r.matched_stop) for r in replies}
    assert said == {
        "eos": ("Hello there", "stop", eos),
        "other-id": ("Hello there", "stop", 7),
        "string": ("Hello there", "stop", "</answer>"),
        "length": ("Hello there", "length", None),
        "unsaid": ("Hello there", "length", None),
    }
    assert len(m) == 0


def test_a_stop_token_the_request_did_not_name_is_still_not_text() -> None:
    """The scheduler stopped on a token the opening did not list (its own stop_token_ids): the
    token's text goes as a stop token's would, and is only sent with include_stop_str_in_output."""
    m = manager()
    text, stop_id = encode("Hello"), encode("!")[0]
    include = Opening((), SamplingParams(include_stop_str_in_output=True))
    dropped, kept = m.handle(
        [
            DetokenizeMsg(1, (*text, stop_id), True, Opening(), "stop", stop_id),
            DetokenizeMsg(2, (*text, stop_id), True, include, "stop", stop_id),
        ]
    )
    assert (dropped.incremental_output, dropped.matched_stop) == ("Hello", stop_id)
    assert (kept.incremental_output, kept.matched_stop) == ("Hello!", stop_id)
    # Not the message's last id: the scheduler's word is the reason, every id is text.
    [elsewhere] = m.handle([DetokenizeMsg(3, (stop_id, *text), True, Opening(), "stop", stop_id)])
    assert (elsewhere.incremental_output, elsewhere.finish_reason) == ("!Hello", "stop")


def test_the_stop_layers_reason_wins_where_it_ended_the_stream_first() -> None:
    m = manager()
    stop = Opening((), SamplingParams(stop=("\n",)))
    cut = encode("one\ntwo")
    held = Opening((), SamplingParams(stop=("lo!",)))
    replies = m.handle(
        [
            # a stop string inside the message's ids
            DetokenizeMsg("string", tuple(cut), True, stop, "length"),
            # an EOS inside the ids, the scheduler still says length
            DetokenizeMsg("eos", (*encode("ok"), 151645, *encode("more")), True, Opening(), "length"),
            # a stop string completed by the text the end flushes: its own tokens say "lo!"
            DetokenizeMsg("flush", tuple(encode("Hello!")), True, held, "stop", 151643),
        ]
    )
    said = {r.uid: (r.incremental_output, r.finish_reason, r.matched_stop) for r in replies}
    assert said == {
        "string": ("one", "stop", "\n"),
        "eos": ("ok", "stop", 151645),
        "flush": ("Hel", "stop", "lo!"),
    }


def test_a_stop_on_an_invalid_id_is_an_error_and_the_reason_still_arrives() -> None:
    m = manager()
    size = m.codec().vocab_size
    [reply] = m.handle([DetokenizeMsg(1, (32, size + 3), True, Opening(), "stop", size + 3)])
    assert reply.error is not None and f"{size + 3} at position 1" in reply.error
    assert (reply.incremental_output, reply.finish_reason, reply.matched_stop) == ("A", "stop", size + 3)
    assert len(m) == 0


def test_an_abort_from_the_scheduler_sends_nothing_held() -> None:
    m = manager()
    emoji = encode("ok 🦩")
    [reply] = m.handle([DetokenizeMsg(1, tuple(emoji[:-1]), True, Opening(), "abort")])
    assert (reply.incremental_output, reply.finish_reason, reply.matched_stop) == ("ok ", "abort", None)
    assert len(m) == 0


@settings(max_examples=max(10, settings().max_examples // 2))
@given(
    ids=id_lists("qwen3", max_size=24),
    reason=st.sampled_from([None, "length", "stop", "abort"]),
    matched=st.sampled_from(["last", "other", "string", None]),
    include=st.booleans(),
    pieces=st.integers(1, 3),
)
def test_any_end_the_scheduler_gives_is_the_replys_reason_with_decodes_text(
    ids: list[int], reason: FinishKind | None, matched: str | None, include: bool, pieces: int
) -> None:
    """Without stop rules of its own (no stop strings, EOS ignored), a request ends with the
    scheduler's reason, and its text is ``decode`` of its ids (less the stop token it stopped on,
    unless included); an abort's text is a prefix of that."""
    m = manager()
    stop: str | int | None = None
    if reason == "stop":
        stop = {"last": ids[-1] if ids else 0, "other": 7, "string": "</s>", None: None}[matched]
    params = SamplingParams(ignore_eos=True, include_stop_str_in_output=include)
    cuts = [len(ids) * k // pieces for k in range(pieces + 1)]
    chunks = [tuple(ids[a:b]) for a, b in zip(cuts, cuts[1:])]
    out = ""
    for n, chunk in enumerate(chunks):
        last = n == len(chunks) - 1
        msg = DetokenizeMsg(
            "r",
            chunk,
            last,
            Opening((), params) if n == 0 else None,
            reason if last else None,
            stop if last else None,
        )
        [reply] = m.handle([msg])
        assert reply.error is None
        out += reply.incremental_output
    assert reply.finished and reply.finish_reason == (reason or "length") and reply.matched_stop == stop
    dropped = reason == "stop" and matched == "last" and ids and not include and ids[-1] == stop
    text_ids = ids[:-1] if dropped else ids
    full = reference("qwen3", text_ids, skip=True)
    if reason == "abort":
        assert full.startswith(out)
    else:
        assert out == full
    assert len(m) == 0


# --- explicit open and hand-back ------------------------------------------------------------------


def test_a_message_for_a_uid_not_held_is_an_error_and_never_opens_a_request() -> None:
    """Never opened, ended beyond the remember_ended window, or lost with another worker: an error
    reply, nothing held, and no growth however many such uids come."""
    m = manager(remember_ended=4)
    [never] = m.handle([DetokenizeMsg("never", (32, 33))])
    assert never.finished and never.error is not None and never.error.startswith(UNKNOWN_REQUEST)
    assert never.incremental_output == "" and never.finish_reason is None and len(m) == 0
    [again] = m.handle([DetokenizeMsg("never", (34,))])  # answered once: no second finished reply
    assert again.error is not None and again.error.startswith(UNKNOWN_REQUEST) and not again.finished
    [opened] = m.handle([DetokenizeMsg("never", (32,), False, Opening())])  # an opening still opens it
    assert opened.error is None and opened.incremental_output == "A" and "never" in m
    m.abort(["never"])
    m.handle([DetokenizeMsg(n, (32,), True, Opening()) for n in range(10)])  # ten end; four remembered
    early, last = m.handle([DetokenizeMsg(0, (33,)), DetokenizeMsg(9, (33,))])
    assert early.error is not None and early.error.startswith(UNKNOWN_REQUEST)  # forgotten: unknown
    assert last.error is not None and "already ended" in last.error  # remembered: ended
    for batch in range(20):
        replies = m.handle_batch(DetokenizeBatch(tuple(f"u{batch}-{n}" for n in range(500)), (32,) * 500))
        assert len(replies.errors) == 500 and len(replies.ended) == 500 and set(replies.outputs) == {""}
    assert len(m) == 0 and len(m._ended) == 4 and len(m._answered) == 4


def test_drained_requests_continue_exactly_in_another_manager() -> None:
    """A hand-back: every live request as bytes; an Opening with its state continues it exactly,
    mid-character, mid-stop-string and counting down its token limits."""
    prompt = encode("Question:\n")
    output = encode("推理 🦩 answer: naïve </ans> done")
    params = SamplingParams(stop=("</ans>",), max_new_tokens=40, min_tokens=2, skip_special_tokens=False)
    for cut in range(len(output) + 1):
        first, second = manager(), manager()
        first.open("r", Opening(tuple(prompt), params))
        before = "".join(first.detokenize([DetokenizeMsg("r", (t,)) for t in output[:cut]]))
        if "r" not in first:
            continue  # it ended before the cut
        [(uid, state, consumed)] = first.drain()
        assert uid == "r" and consumed == cut and len(first) == 0 and len(state) < 80
        [late] = first.handle([DetokenizeMsg("r", (32,))])
        assert late.error is not None and "handed back" in late.error
        replies = second.handle(
            [DetokenizeMsg("r", tuple(output[cut:]), True, Opening((), params, state, cut))]
        )
        assert replies[0].error is None
        assert before + replies[0].incremental_output == pure_text("qwen3", prompt, output, params)


def test_an_opening_with_a_bad_state_is_an_error_for_that_request() -> None:
    m = manager()
    m.open("live")
    good = open_stream(m.codec_of(SamplingParams()), m.rules(SamplingParams())).to_bytes()
    ended_state = close(open_stream(m.codec_of(SamplingParams())))[0].to_bytes()
    bad = [
        DetokenizeMsg(1, (32,), False, Opening((), SamplingParams(), good[:-1])),  # truncated
        DetokenizeMsg(2, (32,), False, Opening((), SamplingParams(skip_special_tokens=False), good)),  # codec
        DetokenizeMsg(3, (32,), False, Opening((5,), SamplingParams(), good)),  # a prompt too
        DetokenizeMsg(4, (32,), False, Opening((), SamplingParams(), ended_state)),  # already ended
        DetokenizeMsg("live", (32,), False, Opening((), SamplingParams(), good)),  # already open
        DetokenizeMsg(6, (32,), False, Opening((), SamplingParams(), good)),  # fine
    ]
    replies = m.handle(bad)
    reasons = ["checksum", "another codec", "no prompt", "has ended", "already open"]
    for reply, reason in zip(replies, reasons):
        assert reply.error is not None and reason in reply.error, (reply, reason)
    assert replies[5].error is None and replies[5].incremental_output == "A"
    assert all(reply.finished for reply in replies[:5])  # each refusal ends its request
    assert sorted(map(str, m._live)) == ["6"]  # "live", opened twice, ended
    with pytest.raises(ValueError, match="needs a state"):
        Opening((), SamplingParams(), None, 3)


@pytest.mark.parametrize("name", ["qwen3", "llama2"])
@settings(max_examples=max(10, settings().max_examples // 3))
@given(data=st.data())
def test_a_hand_back_at_any_point_gives_every_request_its_text(name: str, data: st.DataObject) -> None:
    """Requests interleaved in batches (one id each, several, invalid ids, messages for unknown
    uids) are drained at a random point; each is re-opened in another manager with its state and
    the ids from its ``consumed`` count on, and its text is what it would have been."""
    reqs = data.draw(requests(name))
    queue: list[DetokenizeMsg] = []
    pending: list[list[DetokenizeMsg]] = []
    sent: dict[int, list[int]] = {}
    for i, (prompt, ids, params, _) in enumerate(reqs):
        ids = [*ids]
        if data.draw(st.booleans()):
            ids.insert(data.draw(st.integers(0, len(ids))), PAST_VOCABULARY)  # invalid: skipped, counted
        sent[i] = ids
        cuts = sorted(data.draw(st.lists(st.integers(0, len(ids)), max_size=4)))
        chunks = [ids[a:b] for a, b in zip([0, *cuts], [*cuts, len(ids)])]
        opening = Opening(tuple(prompt), params)
        pending.append(
            [
                DetokenizeMsg(i, tuple(chunk), n == len(chunks) - 1, opening if n == 0 else None)
                for n, chunk in enumerate(chunks)
            ]
        )
    while any(pending):
        i = data.draw(st.sampled_from([i for i, msgs in enumerate(pending) if msgs]))
        queue.append(pending[i].pop(0))
        if data.draw(st.integers(0, 9)) == 0:
            queue.append(DetokenizeMsg(f"stranger-{len(queue)}", (5,)))
    stop_at = data.draw(st.integers(0, len(queue)))
    first, second = manager(name), manager(name)
    texts: dict[Uid, str] = {i: "" for i in range(len(reqs))}
    done = queue[:stop_at]
    while done:
        cut = data.draw(st.integers(1, len(done)))
        for reply in first.handle(done[:cut]):
            if reply.uid in texts:
                texts[reply.uid] += reply.incremental_output
        done = done[cut:]
    for uid, state, consumed in first.drain():
        index = int(uid)
        params = reqs[index][2]
        [reply] = second.handle(
            [DetokenizeMsg(uid, tuple(sent[index][consumed:]), True, Opening((), params, state, consumed))]
        )
        assert reply.finished and not (reply.error or "").startswith(UNKNOWN_REQUEST)
        texts[uid] += reply.incremental_output
    for index, (prompt, _, params, _) in enumerate(reqs):
        if not any(msg.uid == index for msg in queue[:stop_at]):
            continue  # never opened before the hand-back: nothing to continue
        valid = [token for token in sent[index] if token != PAST_VOCABULARY]
        assert texts[index] == pure_text(name, prompt, valid, params)
    assert len(first) == len(second) == 0


@pytest.mark.parametrize("counts", [False, True])
def test_every_message_of_a_uid_in_a_batch_with_its_opening_counts_its_ids(counts: bool) -> None:
    """A batch that opens a request and carries more of its messages (one id each, or several)
    counts every id for a hand-back: the drained state continues after all of them."""
    ids = [9707, 11, 1879, 0, 198, 40, 1079, 264, 1273, 13]
    step = 3 if counts else 1
    chunks = [tuple(ids[n : n + step]) for n in range(0, 3 * step, step)]
    first = manager("qwen3")
    messages = [
        DetokenizeMsg("r", chunk, False, Opening() if n == 0 else None) for n, chunk in enumerate(chunks)
    ]
    text = "".join(reply.incremental_output for reply in first.handle(messages))
    [(uid, state, consumed)] = first.drain()
    assert consumed == 3 * step
    second = manager("qwen3")
    [reply] = second.handle(
        [DetokenizeMsg(uid, tuple(ids[consumed:]), True, Opening((), SamplingParams(), state, consumed))]
    )
    assert text + reply.incremental_output == tokenizer("qwen3").decode(ids, skip_special_tokens=True)
