"""The incremental comparison (replay/_incremental.py) against the whole texts: the same first
difference, the same U+FFFD finding, the same window of the reference, the same stop string ends;
and its work counted: linear in the characters fed, however they are cut."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from puredetok_audit.replay._incremental import Aligned, StopFinder, common_prefix

texts = st.text(alphabet="ab \ufffd", max_size=40)


def cut(draw: st.DrawFn, text: str) -> list[str]:
    points = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]


@st.composite
def fed(draw: st.DrawFn) -> tuple[str, str, list[tuple[str, str]], str, int]:
    engine, reference = draw(texts), draw(texts)
    tail = draw(texts)
    pieces = [(piece, "") for piece in cut(draw, engine)] + [("", piece) for piece in cut(draw, reference)]
    order = draw(st.permutations(range(len(pieces))))
    engines = iter([p for p, _ in pieces if p])
    references = iter([r for _, r in pieces if r])
    steps = [(next(engines, ""), "") if pieces[k][0] else ("", next(references, "")) for k in order]
    return engine, reference, steps, tail, draw(st.integers(0, 8))


@given(fed())
def test_the_comparison_as_both_arrive_is_the_whole_texts(
    case: tuple[str, str, list[tuple[str, str]], str, int],
) -> None:
    engine, reference, steps, tail, window = case
    aligned = Aligned(window)
    for piece, other in steps:
        aligned.add(engine=piece, reference=other)
    whole = reference + tail
    ending = aligned.end(tail)
    differs = None if whole.startswith(engine) else common_prefix(engine, whole)
    assert ending.differs == differs
    assert (ending.engine_length, ending.reference_length) == (len(engine), len(whole))
    misplaced = any(c == "\ufffd" and (p >= len(whole) or whole[p] != "\ufffd") for p, c in enumerate(engine))
    assert ending.fffd_elsewhere == misplaced
    start = ending.reference_length - len(ending.around)
    assert ending.around == whole[start:] and start <= max(0, min(len(engine), len(reference)) - window)
    assert aligned.agrees_so_far(tail) == (differs is None)
    assert aligned.work <= 4 * (len(engine) + len(whole)) + 4


@given(
    st.lists(st.text(alphabet="ab", min_size=1, max_size=4), max_size=3),
    st.lists(texts, max_size=12),
    texts,
    st.integers(1, 6),
)
def test_stop_strings_are_found_where_they_first_complete(
    stops: list[str], pieces: list[str], tail: str, step: int
) -> None:
    finder = StopFinder(stops, step)
    for piece in pieces:
        finder.add(piece)
    text = "".join(pieces) + tail
    ends = finder.ends_with(tail)
    for stop in stops:
        at = text.find(stop)
        assert ends[stop] == (None if at < 0 else at + len(stop))
    assert finder.work <= len(stops) * 3 * (len(text) + max(map(len, stops), default=0)) + 1
