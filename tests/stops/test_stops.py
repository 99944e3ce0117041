"""The stop layer (docs/stops.md) as hypothesis properties, on all ten real tokenizers the tests
carry (byte-level, SentencePiece with byte fallback, Metaspace, WordPiece with cleanup), and on the
codecs those do not get by default (tests/sources.py): the ``spaces`` family (no decoder) and the
generic fallback, forced on Qwen3 and Llama-2 and where a tokenizer really falls back (a class that
overrides ``decode``, a decoder with no exact model); with ``skip_special_tokens`` both ways.

Stop strings are drawn mostly from the decoded text itself (so that they match, often across
tokens and inside tokens), stop and EOS ids from the ids themselves, and limits around the
length of the stream.
"""

from __future__ import annotations

import functools
import pickle
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import puredetok
from helpers import TOKENIZERS
from puredetok import (
    InvalidTokenError,
    StopRules,
    Stream,
    StreamFinishedError,
    advance,
    advance_many,
    close,
    finish,
    open_stream,
)
from puredetok._core import steady
from puredetok.stops import advance_each, open_like
from puredetok.stops._stream import _advance
from puredetok.testing.strategies import MULTILINGUAL
from sources import EXTRA, FALLBACKS, Source, source
from stop_reference import expected, longest_hold

FAMILIES = [*TOKENIZERS, *EXTRA]  # every real tokenizer: the steady path reads each codec's own summaries
CASES = [(name, skip) for name in FAMILIES for skip in (False, True)]
IDS = [f"{name}-{'skip' if skip else 'keep'}" for name, skip in CASES]
SPECIAL_TEXTS = ("<|im_end|>", "<|endoftext|>", "</s>", "<s>", "[SEP]", "<unk>")


@st.composite
def scenarios(draw: st.DrawFn, src: Source, skip: bool) -> tuple[list[int], list[int], StopRules]:
    """Prompt ids, output ids, and stop rules that are likely to fire somewhere inside them."""
    prompt = draw(st.one_of(st.just([]), src.ids(6)))
    ids = draw(src.ids(30))
    text = src.decode(ids, skip)
    pieces = [st.text(st.sampled_from(MULTILINGUAL + " \n"), min_size=1, max_size=3)]
    pieces.append(st.sampled_from(SPECIAL_TEXTS))
    if text:  # pieces of the text itself, so that they match (twice as likely)
        inside = st.tuples(st.integers(0, len(text) - 1), st.integers(1, 8))
        pieces += [inside.map(lambda at: text[at[0] : sum(at)])] * 2
        # ... and pieces of it that go on differently: held back, then released.
        pieces.append(inside.map(lambda at: text[at[0] : sum(at)] + "\x00"))
    stops = draw(st.lists(st.one_of(*pieces), max_size=4))
    own_eos = src.eos
    some_ids = st.frozensets(st.sampled_from([*ids, own_eos]), max_size=2)
    stop_token_ids = draw(st.one_of(st.just(frozenset[int]()), some_ids))
    eos = draw(st.one_of(st.just(frozenset({own_eos})), some_ids))
    min_tokens = draw(st.one_of(st.just(0), st.integers(0, 3), st.integers(0, len(ids) + 1)))
    max_new_tokens = draw(
        st.one_of(st.none(), st.integers(max(1, min_tokens), max(1, min_tokens) + len(ids) + 1))
    )
    rules = StopRules(
        stop=stops,
        stop_token_ids=stop_token_ids,
        eos_token_ids=eos,
        ignore_eos=draw(st.booleans()),
        max_new_tokens=max_new_tokens,
        min_tokens=min_tokens,
        include_stop_str_in_output=draw(st.booleans()),
    )
    return prompt, ids, rules


def one_by_one(stream: Stream, ids: list[int]) -> tuple[Stream, list[str], list[Stream]]:
    """Advance token by token until the stream finishes; the deltas and every stream on the way."""
    deltas, seen = [], [stream]
    for token_id in ids:
        if stream.finished:
            break
        stream, delta = advance(stream, token_id)
        deltas.append(delta)
        seen.append(stream)
    return stream, deltas, seen


def closed(stream: Stream) -> tuple[Stream, str]:
    return close(stream) if not stream.finished else (stream, "")


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@given(data=st.data())
def test_streamed_text_equals_the_plain_reference_for_every_chunking(
    name: str, skip: bool, data: st.DataObject
) -> None:
    """One by one, in random chunks, or all at once: the same stream, the same text, and that text
    is the reference (decode up to the stop, cut at the first stop string or kept)."""
    src = source(name)
    prompt, ids, rules = data.draw(scenarios(src, skip))
    want_text, want_reason = expected(src, skip, ids, rules, prompt)
    opened = open_stream(src.codec(skip), rules, prompt)

    stream, deltas, _ = one_by_one(opened, ids)
    ended, tail = closed(stream)
    assert "".join(deltas) + tail == want_text
    assert ended.finish_reason == want_reason

    cuts = sorted(data.draw(st.lists(st.integers(0, len(ids)), max_size=5)))
    chunked, texts, last = opened, [], 0
    for cut in [*cuts, len(ids)]:
        if chunked.finished:
            break
        chunked, text = advance_many(chunked, ids[last:cut])
        texts.append(text)
        last = cut
    assert chunked == stream
    assert "".join(texts) == "".join(deltas)

    at_once, text = advance_many(opened, ids)
    assert at_once == stream and text == "".join(deltas)

    if rules.include_stop_str_in_output and isinstance(want_reason.matched, str):
        assert want_text.endswith(want_reason.matched)


def general(stream: Stream, token_id: int) -> tuple[Stream, str] | type[Exception]:
    """What the general path (the core's step, then the stop layer's) gives, or its error's type."""
    try:
        return _advance(stream, token_id)
    except (InvalidTokenError, StreamFinishedError) as error:
        return type(error)


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@given(data=st.data())
def test_the_steady_path_gives_what_the_general_path_gives(
    name: str, skip: bool, data: st.DataObject
) -> None:
    """advance (its steady path, or the general one from any other core hold: a byte held, a
    prompt's echo) gives, on every token of every stream on the way, the same stream (its fields,
    and the same steady path's tables, so it goes on alike) and text as the general path, or the
    same error:
    stop strings across many ids and inside one, specials, min_tokens, include_stop_str_in_output,
    ending ids, limits, ids past the vocabulary. Each stream on the way carries the steady path's
    tables exactly when it is steady (rule 3 of puredetok.stops._stream)."""
    src = source(name)
    prompt, ids, rules = data.draw(scenarios(src, skip))
    size = src.codec(skip).vocab_size
    extra = data.draw(st.lists(st.sampled_from([-1, size, size + 3]), max_size=2))
    stream = open_stream(src.codec(skip), rules, prompt)
    steady_hold, _ = steady(stream.codec)
    summarised = rules.ending_ids <= stream.codec.added_ids  # else no token is told quiet
    for token_id in [*ids, *extra]:
        want = general(stream, token_id)
        got = advanced(stream, token_id)
        assert got == want
        if not isinstance(got, tuple) or not isinstance(want, tuple):
            continue
        assert got[0]._steady is want[0]._steady
        stream = got[0]
        is_steady = not stream.finished and stream.hold is steady_hold and not stream.held
        assert (stream._steady is not None) == (summarised and is_steady)
        if stream.finished:
            break


def advanced(stream: Stream, message: int | list[int]) -> tuple[Stream, str] | type[Exception]:
    """What advancing ``stream`` by ``message`` gives, or the type of the error it raises."""
    try:
        return advance_many(stream, message) if isinstance(message, list) else advance(stream, message)
    except (InvalidTokenError, StreamFinishedError) as error:
        return type(error)


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@given(data=st.data())
@settings(max_examples=max(10, settings().max_examples // 2))
def test_advancing_each_stream_at_once_is_advancing_them_in_turn(
    name: str, skip: bool, data: st.DataObject
) -> None:
    """advance_each (a manager's batch: many streams, one message each, some ending their stream,
    some invalid, some for a finished stream) gives what advance/advance_many give each in turn,
    up to the first message that raises; that one raises for the caller."""
    src = source(name)
    streams = []
    for _ in range(data.draw(st.integers(1, 4))):
        prompt, ids, rules = data.draw(scenarios(src, skip))
        stream, _, _ = one_by_one(open_stream(src.codec(skip), rules, prompt), ids[: len(ids) // 2])
        streams.append((stream, ids[len(ids) // 2 :]))
    size = src.codec(skip).vocab_size
    bad = st.sampled_from([-1, size, size + 7, 2**40])
    for round_ in range(data.draw(st.integers(1, 6))):
        indices = st.sampled_from(range(len(streams)))
        picked = data.draw(st.lists(indices, min_size=1, max_size=6, unique=True))
        messages: list[int | list[int]] = []
        for index in picked:
            rest = streams[index][1]
            one = rest[round_] if round_ < len(rest) else data.draw(st.integers(0, size - 1))
            messages.append(
                data.draw(
                    st.one_of(
                        st.just(one),
                        st.lists(st.sampled_from([one, *rest[:12]]), max_size=10),
                        bad,
                        st.lists(st.one_of(st.just(one), bad), min_size=2, max_size=4),
                    )
                )
            )
        olds = [streams[index][0] for index in picked]
        news, texts, ended = advance_each(olds, messages)
        wants = [advanced(old, message) for old, message in zip(olds, messages)]
        stop = next((n for n, want in enumerate(wants) if not isinstance(want, tuple)), len(wants))
        assert len(news) == len(texts) == stop
        assert list(zip(news, texts)) == wants[:stop]
        assert ended == [n for n, new in enumerate(news) if new.finished]
        if stop < len(wants):
            assert advanced(olds[stop], messages[stop]) is wants[stop]
        for index, new in zip(picked, news):
            streams[index] = (new, streams[index][1])


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@given(data=st.data())
@settings(max_examples=max(10, settings().max_examples // 4))
def test_a_stream_opened_like_another_is_a_stream_opened_afresh(
    name: str, skip: bool, data: st.DataObject
) -> None:
    """open_like (a manager opening requests alike) equals open_stream with the same codec, rules
    and prompt, and continues identically, whatever the stream it is opened like: fresh, mid-way,
    or resumed from its bytes with its counts part-spent."""
    src = source(name)
    codec = src.codec(skip)
    prompt, ids, rules = data.draw(scenarios(src, skip))
    base, _, _ = one_by_one(
        open_stream(codec, rules, data.draw(src.ids(6))), ids[: data.draw(st.integers(0, 4))]
    )
    if data.draw(st.booleans()):
        base = Stream.from_bytes(codec, base.to_bytes())
    if base.finished:
        base = open_stream(codec, rules)
    like, afresh = open_like(base, prompt), open_stream(codec, rules, prompt)
    assert like == afresh
    ended_like, texts_like, _ = one_by_one(like, ids)
    ended_afresh, texts_afresh, _ = one_by_one(afresh, ids)
    assert ended_like == ended_afresh and texts_like == texts_afresh


def test_advance_each_needs_one_message_per_stream() -> None:
    codec = source("qwen3").codec(True)
    with pytest.raises(ValueError, match="one message per stream"):
        advance_each([open_stream(codec)], [1, 2])


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@given(data=st.data())
def test_hold_back_is_exactly_what_could_start_a_stop_string(
    name: str, skip: bool, data: st.DataObject
) -> None:
    """After every token: the held text is the longest suffix of the released text that is a proper
    prefix of a stop string (so shorter than the longest one); nothing else is held beyond what the
    core holds; a finished stream holds nothing, emits nothing more, and refuses tokens."""
    src = source(name)
    prompt, ids, rules = data.draw(scenarios(src, skip))
    c = src.codec(skip)
    longest = max(map(len, rules.stop), default=1)
    stream, emitted = open_stream(c, rules, prompt), ""
    for count, token_id in enumerate(ids, 1):
        stream, delta = advance(stream, token_id)
        emitted += delta
        if stream.finished:
            assert stream.held == ""
            assert close(stream) == (stream, "")
            with pytest.raises(StreamFinishedError):
                advance(stream, token_id)
            with pytest.raises(StreamFinishedError):
                advance_many(stream, [token_id])
            break
        assert len(stream.held) < longest
        assert stream.held == longest_hold(emitted + stream.held, rules.stop)
        so_far = src.continuation(prompt, ids[:count], skip)
        assert emitted + stream.held + finish(stream.decode) == so_far


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@given(data=st.data())
@settings(max_examples=max(10, settings().max_examples // 2))
def test_nothing_emitted_is_ever_withdrawn(name: str, skip: bool, data: st.DataObject) -> None:
    """What a stream has emitted is a prefix of the final text whatever comes next, including
    continuations that complete a stop string."""
    src = source(name)
    prompt, ids, rules = data.draw(scenarios(src, skip))
    _, deltas, _ = one_by_one(open_stream(src.codec(skip), rules, prompt), ids)
    emitted = "".join(deltas)
    completions = [src.encode(stop[1:]) for stop in rules.stop]
    for more in [*completions, data.draw(src.ids(6))]:
        final, _ = expected(src, skip, ids + list(more), rules, prompt)
        assert final.startswith(emitted), (more, emitted, final)


@functools.cache
def restored(name: str, skip: bool) -> puredetok.Codec:
    """The codec as another process has it (pickled once)."""
    return cast(puredetok.Codec, pickle.loads(pickle.dumps(source(name).codec(skip))))


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@given(data=st.data())
def test_a_saved_stream_resumes_identically(name: str, skip: bool, data: st.DataObject) -> None:
    """G6 for streams: every stream on the way (after a prompt, mid-stop-prefix, counting down
    ``min_tokens`` and ``max_new_tokens``, finished) saved as bytes or pickled, and resumed with
    the codec elsewhere, is equal and goes on identically; its bytes leave the codec behind."""
    src = source(name)
    prompt, ids, rules = data.draw(scenarios(src, skip))
    _, _, seen = one_by_one(open_stream(src.codec(skip), rules, prompt), ids)
    elsewhere = restored(name, skip)
    for stream in seen:
        data_ = stream.to_bytes()
        if elsewhere.exact:  # the fallback's state holds its window of ids and their text
            assert len(data_) < 120 + 4 * sum(map(len, rules.stop)) + len(finish(stream.decode).encode())
        assert Stream.from_bytes(elsewhere, data_) == stream
    middle = data.draw(st.integers(0, len(seen) - 1))
    saved, rest = seen[middle], ids[middle:]
    for clone in (
        Stream.from_bytes(elsewhere, saved.to_bytes()),
        pickle.loads(pickle.dumps(saved)).resume(elsewhere),
    ):
        assert clone == saved and hash(clone) == hash(saved)
        assert one_by_one(clone, rest)[:2] == one_by_one(saved, rest)[:2]
        assert closed(one_by_one(clone, rest)[0]) == closed(one_by_one(saved, rest)[0])


@pytest.mark.parametrize("skip", [False, True])
def test_the_extra_sources_are_the_spaces_family_and_the_fallback(skip: bool) -> None:
    spaces = source("spaces").codec(skip)
    assert spaces.exact and spaces.family == "spaces", spaces.reason
    for label in FALLBACKS:
        c = source(label).codec(skip)
        assert not c.exact and c.family == "window", (label, c.reason)
