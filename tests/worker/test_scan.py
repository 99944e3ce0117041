"""The recursion-free msgpack scanner: it agrees with msgspec on where every value ends, and keeps
its depth and element limits whatever the bytes."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.inputs import WIRE_SHAPES
from puredetok.worker import _wire as wire
from puredetok.worker._scan import DEFAULT_MAX_DEPTH, ScanError, Scanner

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
    | st.binary(max_size=300)
    | st.builds(msgspec.msgpack.Ext, st.integers(0, 127), st.binary(max_size=300))
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=8), inner, max_size=20),
    max_leaves=60,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@given(values, st.binary(max_size=4))
def test_the_scanner_finds_where_any_value_ends(value: Any, after: bytes) -> None:
    data = msgspec.msgpack.encode(value) + after
    if depth(value) <= DEFAULT_MAX_DEPTH:
        assert Scanner(data).skip(0) == len(data) - len(after)
    else:
        with pytest.raises(ScanError, match="too_deep"):
            Scanner(data).skip(0)


@given(values)
def test_a_value_cut_short_is_malformed(value: Any) -> None:
    data = msgspec.msgpack.encode(value)
    for cut in range(len(data)):
        with pytest.raises(ScanError) as caught:
            Scanner(data[:cut], max_depth=10**6).skip(0)
        assert caught.value.reason == "not_msgpack"


@given(st.binary(min_size=1, max_size=24))
def test_random_bytes_are_one_value_exactly_when_msgspec_reads_them(data: bytes) -> None:
    """Structure only: msgspec also refuses what the scanner does not look at (UTF-8 in strings,
    unhashable keys, timestamps)."""
    try:
        whole = Scanner(data, max_depth=10**6).skip(0) == len(data)
    except ScanError:
        whole = False
    try:
        msgspec.msgpack.decode(data)
    except msgspec.DecodeError as error:
        if whole:
            assert any(word in str(error).lower() for word in ("utf-8", "hashable", "timestamp")), error
    else:
        assert whole


@pytest.mark.parametrize("opener", [b"\x91", b"\x81\xa1k", b"\xdc\x00\x01", b"\xdf\x00\x00\x00\x01\xa1k"])
@pytest.mark.parametrize("levels", [1, 32, 33, 1000, 200_000])
def test_depth_is_checked_without_recursion_at_any_depth(opener: bytes, levels: int) -> None:
    data = opener * levels + b"\x00"
    if levels <= DEFAULT_MAX_DEPTH:
        assert Scanner(data).skip(0) == len(data)
    else:
        with pytest.raises(ScanError) as caught:
            Scanner(data).skip(0)
        assert caught.value.reason == "too_deep"
    assert Scanner(data, max_depth=levels, max_elements=2 * levels + 1).skip(0) == len(data)  # maps: keys too


def test_the_budget_counts_every_value_across_calls() -> None:
    data = msgspec.msgpack.encode(list(range(10))) * 3
    scanner = Scanner(data, max_elements=25)
    first = scanner.skip(0)
    second = scanner.skip(first)
    assert scanner.left == 3
    with pytest.raises(ScanError) as caught:
        scanner.skip(second)
    assert caught.value.reason == "too_many_values"


@pytest.mark.parametrize("first", [0xDD, 0xDF, 0xDB, 0xC6, 0xC9, 0xDC, 0xDE, 0xDA, 0xC5, 0xC8])
def test_huge_declared_lengths_are_refused_at_once(first: int) -> None:
    with pytest.raises(ScanError) as caught:
        Scanner(bytes([first]) + b"\xff\xff\xff\xff\x00\x01").skip(0)
    assert caught.value.reason == "not_msgpack"


def test_items_marks_the_value_too_deep_and_reads_the_others() -> None:
    deep = b"\x91" * 40 + b"\x00"
    data = b"\x93\x01" + deep + b"\x02"
    spans, end = Scanner(data).items(0)
    assert end == len(data)
    assert [(data[a:b], too_deep) for a, b, too_deep in spans] == [
        (b"\x01", False),
        (deep, True),
        (b"\x02", False),
    ]


class _Counting(Scanner):
    """A scanner that adds the values it reads to :attr:`read` (what its budget spent)."""

    read = 0

    def skip(self, position: int, max_depth: int | None = -1) -> int:
        left = self.left
        try:
            return super().skip(position, max_depth)
        finally:
            _Counting.read += left - self.left


@pytest.mark.parametrize("shape", list(WIRE_SHAPES))
def test_decoding_a_frame_of_any_shape_reads_each_value_a_bounded_number_of_times(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decode path's cost is counted, not timed: the values the scanners read (a frame with a
    bad message is read part by part) stay within three times the frame's own values, at a small
    and a 16 times larger size; and every message is either decoded or rejected.
    """
    monkeypatch.setattr(wire, "Scanner", _Counting)
    _, _, make, kinds = WIRE_SHAPES[shape]
    decoder = wire.FrameDecoder(kinds) if kinds else wire.FrameDecoder()
    for size in (64, 1_024):
        frame = make(size)
        whole = Scanner(frame, max_elements=1 << 30)
        whole.skip(0, None)
        values = (1 << 30) - whole.left
        _Counting.read = 0
        decoded = decoder.decode(frame)
        assert _Counting.read <= 3 * values + 8
        if shape.startswith("tokenize"):  # scanned whole before anything in it is built
            assert _Counting.read >= values - 8
        assert len(decoded.rejected) == ("bad" in shape or "too deep" in shape)
        assert len(decoded.batch) > 0
