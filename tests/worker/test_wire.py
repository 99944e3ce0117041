"""The message records and the wire format: typed msgpack frames, schema-checked, never pickle."""

from __future__ import annotations

import logging
import pickle
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from puredetok.serving._messages import (
    INBOUND,
    KINDS,
    PROTOCOL_VERSION,
    TO_BACKEND,
    TO_FRONTEND,
    AbortBackendMsg,
    AbortMsg,
    DetokenizeBatch,
    DetokenizeMsg,
    HealthCheckMsg,
    HealthReply,
    Message,
    Opening,
    ReadyMsg,
    ReplyBatch,
    SamplingParams,
    TokenizeMsg,
    UserMsg,
    UserReply,
)
from puredetok.worker._wire import DropCounter, FrameDecoder, FrameError, encode_batch

uids = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=20))
ids = st.lists(st.integers(0, 2**63 - 1), max_size=8).map(tuple)  # token ids: what a saved state holds
prompt_ids = st.lists(st.integers(0, 2**63 - 1), max_size=8).map(tuple)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
params = st.builds(
    SamplingParams,
    max_new_tokens=st.none() | st.integers(100, 10**6),
    min_tokens=st.integers(0, 100),
    stop=st.lists(st.text(min_size=1, max_size=6), max_size=3).map(tuple),
    stop_token_ids=st.lists(st.integers(0, 2**31), max_size=3).map(tuple),
    ignore_eos=st.booleans(),
    include_stop_str_in_output=st.booleans(),
    skip_special_tokens=st.booleans(),
    clean_up_tokenization_spaces=st.none() | st.booleans(),
    spaces_between_special_tokens=st.none() | st.booleans(),
    extra=st.dictionaries(st.text(max_size=8), json_values, max_size=3),
)
endings = st.one_of(
    st.tuples(st.booleans(), st.none(), st.none()),
    st.tuples(st.just(True), st.sampled_from(["length", "abort"]), st.none()),
    st.tuples(st.just(True), st.just("stop"), st.none() | st.text(max_size=4) | st.integers(0, 2**31)),
)
messages_by_kind: dict[str, st.SearchStrategy[Any]] = {
    "tokenize": st.builds(
        TokenizeMsg,
        uids,
        text=st.none() | st.text(max_size=20),
        messages=st.none() | st.lists(json_values, max_size=3).map(tuple),
        params=params,
        template_options=st.dictionaries(st.text(max_size=8), json_values, max_size=2),
        add_special_tokens=st.booleans(),
    ),
    "detokenize": st.builds(
        lambda uid, token_ids, opening, end: DetokenizeMsg(uid, token_ids, end[0], opening, end[1], end[2]),
        uids,
        ids,
        st.none()
        | st.builds(Opening, prompt_ids, params)
        | st.builds(Opening, st.just(()), params, st.binary(max_size=40), st.integers(0, 2**40)),
        endings,
    ),
    "abort": st.builds(AbortMsg, uids),
    "health": st.builds(HealthCheckMsg, st.integers(-(2**63), 2**63 - 1)),
    "user": st.builds(UserMsg, uids, ids, params),
    "reply": st.booleans().flatmap(
        lambda finished: st.builds(
            UserReply,
            uids,
            st.text(max_size=20),
            st.just(finished),
            st.none() | st.sampled_from(["stop", "length", "abort"]) if finished else st.none(),
            st.none() | st.text(max_size=4) | st.integers(0, 10**6) if finished else st.none(),
            st.none() | st.text(max_size=30),
        )
    )
    | st.builds(
        lambda uid, state, consumed: UserReply(uid, "", True, None, None, "handed back", state, consumed),
        uids,
        st.binary(max_size=60),
        st.integers(0, 2**40),
    ),
    "abort_backend": st.builds(AbortBackendMsg, uids),
    "health_reply": st.builds(
        HealthReply,
        st.integers(0, 100),
        st.text(max_size=8),
        st.integers(0, 10**6),
        st.integers(0, 10**6),
        st.dictionaries(st.text(max_size=8), st.integers(0, 10**9), max_size=3),
        st.dictionaries(st.text(max_size=8), st.integers(0, 10**9), max_size=3),
    ),
    "ready": st.builds(ReadyMsg, st.text(max_size=8), st.integers(0, 10**6), st.text(max_size=30)),
}
everything = FrameDecoder(KINDS.values())


def test_every_kind_is_tagged_once_and_routed_one_way() -> None:
    assert set(messages_by_kind) == set(KINDS)
    assert len({cls.KIND for cls in KINDS.values()}) == len(KINDS)
    assert not set(INBOUND) & set(TO_BACKEND + TO_FRONTEND)


@pytest.mark.parametrize("kind", sorted(messages_by_kind))
@given(data=st.data())
def test_a_batch_round_trips_exactly(kind: str, data: st.DataObject) -> None:
    batch = data.draw(st.lists(messages_by_kind[kind], min_size=1, max_size=5))
    decoded = everything.decode(encode_batch(batch))
    assert decoded.batch.kind == kind
    assert decoded.batch.items == tuple(batch)
    assert decoded.rejected == ()


def test_the_wire_is_msgpack_columns_for_the_per_token_kinds_and_field_maps_for_the_rest() -> None:
    frame = encode_batch([DetokenizeMsg(7, (1, 2)), DetokenizeMsg("a", (), True)])
    assert msgspec.msgpack.decode(frame) == [
        "detokenize",
        PROTOCOL_VERSION,
        {"uids": [7, "a"], "token_ids": [1, 2], "counts": [2, 0], "finished": [1]},  # empty columns omitted
    ]
    frame = encode_batch([DetokenizeMsg(7, (1,)), DetokenizeMsg(8, (2,))])
    assert "counts" not in msgspec.msgpack.decode(frame)[2]  # one id each: no counts
    frame = encode_batch([UserReply("a", "x"), UserReply("b", "", True, "stop", 5)])
    assert msgspec.msgpack.decode(frame) == [
        "reply",
        PROTOCOL_VERSION,
        {"uids": ["a", "b"], "outputs": ["x", ""], "ended": [[1, "stop", 5]]},
    ]
    frame = encode_batch([AbortMsg(3)])
    assert msgspec.msgpack.decode(frame) == ["abort", PROTOCOL_VERSION, [{"uid": 3}]]
    assert b"pickle" not in frame and not frame.startswith(b"\x80")


def test_messages_are_frozen() -> None:
    reply, field = UserReply(1, "x"), "incremental_output"
    with pytest.raises(AttributeError):
        setattr(reply, field, "y")


def test_a_batch_holds_one_kind_and_at_least_one_message() -> None:
    with pytest.raises(ValueError, match="one kind"):
        encode_batch([AbortMsg(1), DetokenizeMsg(1)])
    with pytest.raises(ValueError, match="at least one"):
        encode_batch([])


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"", "not_msgpack"),
        (b"\xc1", "not_msgpack"),
        (msgspec.msgpack.encode(["detokenize"]), "bad_frame"),
        (msgspec.msgpack.encode({"kind": "detokenize"}), "bad_frame"),
        (msgspec.msgpack.encode(["detokenize", PROTOCOL_VERSION, 5]), "bad_frame"),
        (msgspec.msgpack.encode(["detokenize", "2", []]), "bad_frame"),
        (msgspec.msgpack.encode(["detokenize", PROTOCOL_VERSION, 5, 6]), "bad_frame"),
        (msgspec.msgpack.encode(["user", PROTOCOL_VERSION, []]), "unknown_kind"),
        (msgspec.msgpack.encode(["no such kind", PROTOCOL_VERSION, []]), "unknown_kind"),
        (msgspec.msgpack.encode(["detokenize", 5]), "version"),  # a version 1 frame: never misread
        (
            msgspec.msgpack.encode(["detokenize", PROTOCOL_VERSION + 1, {"uids": [], "token_ids": []}]),
            "version",
        ),
        (encode_batch([DetokenizeMsg(1, (1,) * 100)])[:-3], "not_msgpack"),
        (pickle.dumps(["detokenize", [{"uid": 1}]]), "bad_frame"),  # 0x80 reads as an empty map
    ],
)
def test_unreadable_frames_raise_a_tagged_error(frame: bytes, reason: str) -> None:
    with pytest.raises(FrameError) as caught:
        FrameDecoder().decode(frame)
    assert caught.value.reason == reason


def test_a_frame_over_the_limit_is_refused_unread() -> None:
    frame = encode_batch([DetokenizeMsg(1, tuple(range(1000)))])
    assert FrameDecoder(max_frame_bytes=len(frame)).decode(frame).batch.items
    with pytest.raises(FrameError) as caught:
        FrameDecoder(max_frame_bytes=len(frame) - 1).decode(frame)
    assert caught.value.reason == "oversize"


def test_malformed_messages_are_rejected_one_by_one_and_the_rest_kept() -> None:
    frame = msgspec.msgpack.encode(
        [
            "tokenize",
            PROTOCOL_VERSION,
            [
                {"uid": 1, "text": "a"},
                {"uid": 2, "text": 5},
                {"text": "c"},
                {"uid": True},
                7,
                {"uid": 5, "text": "e", "unknown_field": 1},
            ],
        ]
    )
    decoded = FrameDecoder().decode(frame)
    assert decoded.batch.items == (TokenizeMsg(1, "a"), TokenizeMsg(5, "e"))
    assert [(r.index, r.uid) for r in decoded.rejected] == [(1, 2), (2, None), (3, None), (4, None)]
    assert "text" in decoded.rejected[0].reason


def test_malformed_columns_are_rejected_message_by_message_and_the_rest_kept() -> None:
    """A detokenize frame travels as columns; one bad cell costs its message only."""
    frame = msgspec.msgpack.encode(
        [
            "detokenize",
            PROTOCOL_VERSION,
            {
                "uids": [1, 2, None, 4, True, 6, 7],
                "token_ids": [5, 1.5, 3, "x", 8, 9, 10, 11, None],
                "counts": [1, 1, 1, 1, 1, 1, 3],
                "finished": [5],
                "opens": [[0, {"prompt_ids": [1, 2]}]],
            },
        ]
    )
    decoded = FrameDecoder().decode(frame)
    opening = Opening((1, 2))
    assert decoded.batch.items == (DetokenizeMsg(1, (5,), False, opening), DetokenizeMsg(6, (9,), True))
    assert [(r.index, r.uid) for r in decoded.rejected] == [(1, 2), (2, None), (3, 4), (4, None), (6, 7)]
    assert "token_ids" in decoded.rejected[0].reason


def test_a_frame_from_encode_batch_with_one_bad_cell_keeps_the_others() -> None:
    """The usual frame: one id each, ``counts`` null."""
    frame = encode_batch([DetokenizeMsg(1, (5,)), DetokenizeMsg(2, (6,)), DetokenizeMsg(3, (7,))])
    columns = msgspec.msgpack.decode(frame)[2]
    assert "counts" not in columns
    columns["token_ids"][1] = "x"
    decoded = FrameDecoder().decode(msgspec.msgpack.encode(["detokenize", PROTOCOL_VERSION, columns]))
    assert decoded.batch.items == (DetokenizeMsg(1, (5,)), DetokenizeMsg(3, (7,)))
    assert [(r.index, r.uid) for r in decoded.rejected] == [(1, 2)]


@pytest.mark.parametrize(
    "columns",
    [
        {"uids": [1, 2, 3], "token_ids": [5, 6, 7], "counts": [-1, 2, 2]},  # where each message is: unknown
        {"uids": [1, 2], "token_ids": [5, 6], "counts": [3, 1]},
        {"uids": [1, 2], "token_ids": [5, 6, 7], "counts": [1, 1]},
        {"uids": [1, 2], "token_ids": [5, 6], "counts": []},
        {"uids": [1, 2], "token_ids": [5, 6], "counts": [True, True]},
        {"uids": [1, 2], "token_ids": [5, 6], "counts": [1.0, 1]},
        {"uids": [1, 2], "token_ids": [5, 6, 7]},
        {"uids": [1, 2], "token_ids": [5, "x"], "finished": [True]},
        {"uids": [1, 2], "token_ids": [5, "x"], "finished": [2]},
        {"uids": [1, 2], "token_ids": [5, "x"], "finished": [-1]},
        {"uids": [1, 2], "token_ids": [5, "x"], "opens": [[True, {}]]},
        {"uids": [1, 2], "token_ids": [5, "x"], "opens": [[5, {}]]},
        {"uids": [1, 2], "token_ids": [5, "x"], "opens": [7]},
        {"uids": None, "token_ids": [5]},
        {"token_ids": [5]},
        {"uids": [1, 2], "token_ids": [5, "x"], "finished": [0], "reasons": [[2, "stop", None]]},
        {"uids": [1, 2], "token_ids": [5, "x"], "finished": [0], "reasons": [[0, "stop"]]},
        {"uids": [1, 2], "token_ids": [5, "x"], "finished": [0], "reasons": ["stop"]},
    ],
)
def test_columns_that_do_not_say_where_each_message_is_refuse_the_frame(columns: dict[str, Any]) -> None:
    with pytest.raises(FrameError) as caught:
        FrameDecoder().decode(msgspec.msgpack.encode(["detokenize", PROTOCOL_VERSION, columns]))
    assert caught.value.reason == "bad_frame"


@pytest.mark.parametrize(
    "columns",
    [
        {"uids": [1, 2], "token_ids": [5]},
        {"uids": [1], "token_ids": [5], "counts": [2]},
        {"uids": [1], "token_ids": [5], "finished": [3]},
        {"uids": [1], "token_ids": [5], "opens": [[1, {}]]},
        {"uids": [1], "token_ids": [5], "finished": [0], "reasons": [[1, "stop", None]]},
        {"uids": [1], "token_ids": [5], "reasons": [[0, "stop", None]]},  # not finished
        {"uids": [1], "token_ids": [5], "finished": [0], "reasons": [[0, "done", None]]},
        {"uids": [1], "token_ids": [5], "finished": [0], "reasons": [[0, "length", 7]]},
        {"uids": [1], "token_ids": [5], "finished": [0], "reasons": [[0, "stop", 1], [0, "stop", 2]]},
    ],
)
def test_columns_that_do_not_add_up_are_refused_when_built(columns: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        DetokenizeBatch(**{key: tuple(value) for key, value in columns.items()})


def test_a_bad_reason_costs_its_message_only() -> None:
    frame = msgspec.msgpack.encode(
        [
            "detokenize",
            PROTOCOL_VERSION,
            {
                "uids": [1, 2, 3, 4],
                "token_ids": [5, 6, 7, 8],
                "finished": [0, 1, 3],
                "reasons": [
                    [0, "stop", 151645],
                    [1, "stopped", None],
                    [2, "length", None],
                    [3, "length", "x"],
                ],
            },
        ]
    )
    decoded = FrameDecoder().decode(frame)
    assert decoded.batch.items == (DetokenizeMsg(1, (5,), True, None, "stop", 151645),)
    assert [(r.index, r.uid) for r in decoded.rejected] == [(1, 2), (2, 3), (3, 4)]
    assert "needs finished=True" in decoded.rejected[1].reason
    assert "needs finish_reason='stop'" in decoded.rejected[2].reason


def test_a_detokenize_message_says_why_only_when_it_ends() -> None:
    with pytest.raises(ValueError, match="needs finished=True"):
        DetokenizeMsg(1, (), False, None, "length")
    with pytest.raises(ValueError, match="finish_reason"):
        DetokenizeMsg(1, (), True, None, "eos")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs finish_reason='stop'"):
        DetokenizeMsg(1, (), True, None, "abort", 5)


def test_a_reply_that_has_not_finished_has_no_reason() -> None:
    """Checked where replies are framed (one per message: not each when it is made)."""
    with pytest.raises(ValueError, match="not finished"):
        encode_batch([UserReply(1, "", False, "stop")])
    with pytest.raises(ValueError, match="consumed"):
        encode_batch([UserReply(1, "", True, state=b"x")])
    frame = msgspec.msgpack.encode(
        ["reply", PROTOCOL_VERSION, {"uids": [1], "outputs": [""], "handed": [[0, b"x", 1]]}]
    )
    [handed] = everything.decode(frame).batch.items
    assert isinstance(handed, UserReply) and handed.finished  # a hand-back is finished on the wire
    assert UserReply(1, "", True, "stop", "x").matched_stop == "x"


@given(st.lists(messages_by_kind["detokenize"], max_size=6))
def test_detokenize_columns_hold_exactly_their_messages(messages: list[DetokenizeMsg]) -> None:
    assert DetokenizeBatch.of(messages).items == tuple(messages)


@given(st.lists(messages_by_kind["reply"], max_size=6), st.integers(0, 6))
def test_reply_columns_hold_exactly_their_replies_and_join_in_order(
    replies: list[UserReply], cut: int
) -> None:
    assert ReplyBatch.of(replies).items == tuple(replies)
    joined = ReplyBatch.join([ReplyBatch.of(replies[:cut]), ReplyBatch.of(replies[cut:])])
    assert joined == ReplyBatch.of(replies)


def test_drops_are_counted_per_reason_and_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    drops = DropCounter(logging.getLogger("test.drops"))
    with caplog.at_level(logging.WARNING, logger="test.drops"):
        for _ in range(5):
            drops.drop("oversize", "big")
        drops.drop("not_msgpack", "junk")
    assert drops.counts == {"oversize": 5, "not_msgpack": 1}
    assert len(caplog.records) == 2


@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_a_frame_error(frame: bytes) -> None:
    try:
        FrameDecoder().decode(frame)
    except FrameError:
        pass


def test_sampling_params_default_as_engines_do() -> None:
    params = SamplingParams()
    assert params.skip_special_tokens and params.clean_up_tokenization_spaces is None
    assert params.spaces_between_special_tokens is None
    assert params.stop == () and params.max_new_tokens is None and not params.ignore_eos


def _deep(levels: int) -> bytes:
    return b"\x91" * levels + b"\x00"


@pytest.mark.parametrize("levels", [29, 30, 100, 999, 1000, 1001, 5000, 100_000])
def test_deep_nesting_anywhere_costs_its_message_at_most(levels: int) -> None:
    """A 1 KB frame of 1,000 nested arrays raised RecursionError out of msgspec (its skipping of the
    batch, its decoding of values of any shape) and killed the worker. Now nothing is skipped by
    recursion; a message nested deeper than the limit is rejected alone, with its uid."""
    marker = msgspec.msgpack.encode("@")
    extra = SamplingParams(extra={"x": "@"})
    frames: dict[str, list[Message]] = {
        "opening": [
            DetokenizeMsg(1, (5,)),
            DetokenizeMsg(2, (6,), open=Opening((1,), extra)),
            DetokenizeMsg(3, (7,)),
        ],
        "chat": [
            TokenizeMsg(1, "a"),
            TokenizeMsg(2, None, ({"role": "user", "content": "@"},)),
            TokenizeMsg(3, "c"),
        ],
        "options": [
            TokenizeMsg(1, "a"),
            TokenizeMsg(2, "b", template_options={"t": "@"}),
            TokenizeMsg(3, "c"),
        ],
        "extra": [TokenizeMsg(1, "a"), TokenizeMsg(2, "b", params=extra), TokenizeMsg(3, "c")],
    }
    decoder = FrameDecoder()
    for name, messages in frames.items():
        frame = encode_batch(messages).replace(marker, _deep(levels), 1)
        decoded = decoder.decode(frame)
        # Levels above the nested value: the message's map, then (opening:) its opening and params
        # and the extras; (chat:) the messages and the message; (options:) the options; (extra:)
        # the params and the extras.
        deep_enough = levels + {"opening": 4, "chat": 3, "options": 2, "extra": 3}[name] > 32
        kept = [getattr(message, "uid", None) for message in decoded.batch.items]
        if deep_enough:
            assert kept == [1, 3], name
            assert [(r.index, r.uid) for r in decoded.rejected] == [(1, 2)], name
            assert "nested arrays and maps" in decoded.rejected[0].reason
        else:
            assert kept == [1, 2, 3], name


@pytest.mark.parametrize("levels", [1000, 100_000])
@pytest.mark.parametrize("where", ["frame", "batch", "uid", "token cell", "unknown field", "reason"])
def test_deep_nesting_in_any_place_is_a_frame_error_or_a_rejected_message(levels: int, where: str) -> None:
    deep = _deep(levels)
    frame = {
        "frame": deep,
        "batch": b"\x93\xaadetokenize" + msgspec.msgpack.encode(PROTOCOL_VERSION) + deep,
        "uid": msgspec.msgpack.encode(["abort", PROTOCOL_VERSION, [{"uid": "@"}, {"uid": 2}]]),
        "token cell": msgspec.msgpack.encode(
            ["detokenize", PROTOCOL_VERSION, {"uids": [1, 2], "token_ids": ["@", 6]}]
        ),
        "unknown field": msgspec.msgpack.encode(
            ["abort", PROTOCOL_VERSION, [{"uid": 1, "junk": "@"}, {"uid": 2}]]
        ),
        "reason": msgspec.msgpack.encode(
            [
                "detokenize",
                PROTOCOL_VERSION,
                {"uids": [1, 2], "token_ids": [5, 6], "finished": [0, 1], "reasons": [[0, "stop", "@"]]},
            ]
        ),
    }[where].replace(msgspec.msgpack.encode("@"), deep, 1)
    try:
        decoded = FrameDecoder().decode(frame)
    except FrameError as error:
        assert where in ("frame", "batch") and error.reason == "bad_frame"
        return
    kept = [getattr(message, "uid", None) for message in decoded.batch.items]
    if where == "unknown field" and kept == [1, 2]:
        return  # msgspec could skip it whole within the stack it had (it builds nothing): ignored
    assert kept == [2]
    assert [(r.index, r.uid) for r in decoded.rejected] == [
        (0, None if where == "uid" else 1)
    ] or where == "uid"


def test_a_frame_decoded_on_a_nearly_full_stack_is_still_only_a_frame_error() -> None:
    """msgspec's recursion guard counts the caller's stack too: called deep in a stack, even a
    shallow value may hit it; the decoder turns that into a FrameError as well (down to the depth
    where the decoder's own few calls still fit)."""
    frame = encode_batch([DetokenizeMsg(1, (5,), open=Opening((1,), SamplingParams(extra={"x": [[[[1]]]]})))])
    decoder = FrameDecoder()

    def nest(levels: int, call: Any) -> Any:
        return nest(levels - 1, call) if levels else call()

    room = 0
    try:
        while True:  # how deep a call of a few frames still fits
            nest(room, lambda: nest(8, lambda: None))
            room += 5
    except RecursionError:
        pass
    outcomes: set[int | str] = set()
    for levels in range(room - 300, room - 5):
        try:
            outcomes.add(len(nest(levels, lambda: decoder.decode(frame)).batch))
        except FrameError as error:
            outcomes.add(error.reason)
    assert 1 in outcomes and outcomes <= {1, "too_deep"}


def test_an_open_ended_frame_is_read_within_a_budget_of_values() -> None:
    """A chat message of a million empty arrays would build some 60 MB of Python lists from a 1 MB
    frame: the scanner reads the frame first and refuses it past ``max_elements`` values."""
    frame = encode_batch([TokenizeMsg(1, None, ({"role": "user", "content": "@"},))])
    many = 10**6
    frame = frame.replace(msgspec.msgpack.encode("@"), b"\xdd" + many.to_bytes(4, "big") + b"\x90" * many)
    with pytest.raises(FrameError) as caught:
        FrameDecoder().decode(frame)
    assert caught.value.reason == "too_many_values"
    assert FrameDecoder(max_elements=2 * many).decode(frame).batch.items  # in the budget: read


def test_hostile_frames_only_ever_raise_a_frame_error() -> None:
    """The frames of the worker's fuzz test, in process: each is refused whole (FrameError) or
    read, with its bad messages rejected."""
    from fuzz_frames import hostile_frames

    valid = [
        encode_batch([DetokenizeMsg("v", (1, 2, 3), True, Opening((4,), SamplingParams(stop=("x",))))]),
        encode_batch([TokenizeMsg("t", None, ({"role": "user", "content": "hi"},))]),
    ]
    decoder = FrameDecoder(max_frame_bytes=4 << 20)
    outcomes: dict[str, int] = {}
    for _, frame in hostile_frames(1400, 7, valid):
        try:
            decoded = decoder.decode(frame)
        except FrameError as error:
            outcome = error.reason
        else:
            outcome = "rejected" if decoded.rejected else "read"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert set(outcomes) <= {
        "bad_frame",
        "not_msgpack",
        "unknown_kind",
        "too_many_values",
        "version",
        "rejected",
        "read",
    }


@pytest.mark.parametrize(
    "frame",
    [
        msgspec.msgpack.encode(["detokenize", PROTOCOL_VERSION, {"uids": ["a"], "token_ids": [5]}]),
        msgspec.msgpack.encode(["tokenize", PROTOCOL_VERSION, [{"uid": "a", "text": "a"}]]),
        msgspec.msgpack.encode(["abort", PROTOCOL_VERSION, [{"uid": "a"}]]),
        msgspec.msgpack.encode(["a", PROTOCOL_VERSION, []]),
    ],
)
def test_a_string_that_is_not_utf8_is_a_frame_error_on_every_msgspec(frame: bytes) -> None:
    """msgspec 0.18 (the oldest this package supports) raises ``UnicodeDecodeError``, not its
    ``DecodeError``, for a string that is not UTF-8: the reader takes both, so such a frame is a
    counted drop or a rejected message there too, never an exception out of the reader."""
    bad = frame.replace(b"\xa1a", b"\xa1\x99")
    assert bad != frame
    try:
        decoded = FrameDecoder().decode(bad)
    except FrameError:
        return
    assert not len(decoded.batch) and decoded.rejected
