"""The UTF-8 helpers agree with Python's and the Unicode standard's decoding."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from puredetok._core.decoders.byte_level import Utf8Stage
from puredetok._core.utf8 import Status, incomplete_tail, status

BYTES = st.binary(max_size=12) | st.lists(
    st.sampled_from([0x41, 0x80, 0xBF, 0xC2, 0xE0, 0xED, 0xA0, 0xF0, 0x90, 0xF4, 0x8F, 0xFF]), max_size=10
).map(bytes)


@given(BYTES)
def test_incomplete_tail_is_what_a_continuation_can_still_change(data: bytes) -> None:
    keep = incomplete_tail(data)
    assert 0 <= keep <= 3
    head = data[: len(data) - keep]
    # Whatever follows, the head decodes the same (it is final)...
    for follow in (b"", b"A", b"\x80", b"\x80\x80\x80", b"\xbf\xbf"):
        assert (data + follow).decode("utf-8", "replace").startswith(head.decode("utf-8", "replace"))
    # ...and the tail is a proper prefix of some well-formed character.
    if keep:
        assert any(
            status(data[-keep:] + c) is not Status.INVALID for c in (b"\x80", b"\x90", b"\xa0", b"\xbf")
        )


@given(st.lists(BYTES, max_size=8))
def test_utf8_stage_equals_decoding_everything_at_once(chunks: list[bytes]) -> None:
    stage, hold = Utf8Stage(), b""
    out: list[str] = []
    for chunk in chunks:
        hold, pieces = stage.push(hold, chunk, False)
        out.extend(text for text, _ in pieces)
    out.extend(text for text, _ in stage.flush(hold))
    assert "".join(out) == b"".join(chunks).decode("utf-8", "replace")
    hold2, groups = stage.push_run(b"", list(chunks), False)
    assert "".join(t for values, _ in groups for t in values) + "".join(
        t for t, _ in stage.flush(hold2)
    ) == "".join(out)


def test_surrogate_leads_are_released_at_once() -> None:
    hold, pieces = Utf8Stage().push(b"", b"\xed\xa0", False)
    assert hold == b"" and pieces == [("\ufffd\ufffd", True)]
