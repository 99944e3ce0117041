"""A stream after a prompt reads only the prompt's tail (``start`` through ``Decoding.tail_start``).

The reference is the feed of the whole prompt, as ``start`` opened a stream before: the hold it
leaves, with the prompt's held text as an :class:`~puredetok._core.echo.Echo`. The tail opening must
give the same state (hold equality, Echo included) and the same future deltas, on every tokenizer
in tests/data (with ``skip_special_tokens`` both ways, and with transformers' space cleanup forced
on, which puts cleanup stages after a byte-level or byte-fallback chain), on the class families and
synthetic decoders, and on the generic fallback; for prompts aimed at every edge: byte runs and
incomplete characters at the end (short, and longer than a feed's batch), special tokens, the empty
prompt, one id, text ending where a cleanup rule may still match, any ids.

Each stage's ``settle`` is held to its word directly: from the hold any prompt leaves, an id it
says settles leaves the chain idle. And the count: the ids ``start`` reads of a long prompt are
those of its tail, not the whole prompt (the old opening read every one).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, overload

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import families
import mistral_objects
import puredetok
import synthetic
from helpers import TOKENIZERS, codec, output_lists, prompt_lists, tokenizer, vocabulary
from puredetok import DecodeState, feed, finish, start, step
from puredetok._core.chain import Chain
from puredetok._core.decoders.base import settles
from puredetok._core.echo import Echo
from puredetok._core.stream import BATCH, feed_hold
from puredetok.testing.strategies import byte_runs, special_ids, text_ids

CLEANUP_ENDINGS = (" ", " n", " n'", " '", " 'v", " 'r", " do", " do n", " .", "\n", ":\n", "é")
"""Text endings where a later token may still complete a cleanup rule (or may not)."""


def full_start(c: puredetok.Codec, prompt: Sequence[int]) -> DecodeState:
    """The opening that feeds every id of the prompt (what ``start`` did before)."""
    state, _ = feed(DecodeState(c, c.decoding.initial), list(prompt))
    echo = finish(state)
    return DecodeState(c, Echo(state.hold, echo)) if echo else state


def future(state: DecodeState, output: Sequence[int]) -> list[str]:
    deltas = []
    for token_id in output:
        state, delta = step(state, token_id)
        deltas.append(delta)
    return [*deltas, finish(state)]


def assert_same_opening(c: puredetok.Codec, prompt: list[int], output: list[int]) -> None:
    opened, whole = start(c, prompt), full_start(c, prompt)
    assert opened == whole, prompt
    assert future(opened, output) == future(whole, output), (prompt, output)
    assert feed(opened, output) == feed(whole, output)


@functools.cache
def real_codec(name: str, skip: bool, cleanup: bool | None) -> puredetok.Codec:
    return codec(name, skip, cleanup)


def edge_prompts(name: str) -> st.SearchStrategy[list[int]]:
    """Prompts ending at every edge, after text long enough for a batched feed or not."""
    v = vocabulary(name)
    head: st.SearchStrategy[list[int]] = st.one_of(
        st.just([]), text_ids(v, max_size=8), text_ids(v, max_size=2 * BATCH)
    )
    endings = [
        st.just([]),
        byte_runs(v),
        byte_runs(v, max_size=2 * BATCH),
        special_ids(v, max_size=4),
        st.sampled_from(CLEANUP_ENDINGS).map(v.encode),
        st.integers(0, len(tokenizer(name)) - 1).map(lambda token_id: [token_id]),
    ]
    tail = st.one_of(*endings)
    return st.one_of(
        prompt_lists(name),
        st.tuples(head, tail).map(lambda parts: parts[0] + parts[1]),
        st.tuples(head, st.lists(tail, max_size=3)).map(lambda p: p[0] + [i for part in p[1] for i in part]),
    )


REAL = [(name, skip, cleanup) for name in TOKENIZERS for skip in (False, True) for cleanup in (None, True)]
REAL_IDS = [f"{n}-{'skip' if s else 'keep'}{'-cleanup' if c else ''}" for n, s, c in REAL]


@pytest.mark.parametrize(("name", "skip", "cleanup"), REAL, ids=REAL_IDS)
@given(data=st.data())
def test_the_tail_opening_equals_the_full_feed(
    name: str, skip: bool, cleanup: bool | None, data: st.DataObject
) -> None:
    prompt = data.draw(edge_prompts(name), label="prompt")
    output = data.draw(output_lists(name), label="output")
    assert_same_opening(real_codec(name, skip, cleanup), prompt, output)


def _is_anchor(chain: Chain, token_id: int) -> bool:
    value = chain.table[token_id]
    first = chain.first_table
    return (
        value is not None
        and settles(chain.stages, value)
        and (first is None or settles(chain.stages, first[token_id]))
    )


MISTRAL = [
    (kind, name, skip)
    for kind, name in (("inner", "tekken_240911"), ("vllm", "tekken_240911"), ("tiktoken", "tekken_240911"))
    for skip in (False, True)
]
TAG_STARTS = ("l", "lan", "lang:", "lang:f", "lang:fr")
"""Starts of text that ``MistralCommonBackend`` (vLLM's wrapper) may still cut as a ``lang:xx`` tag."""


@pytest.mark.parametrize(("kind", "name", "skip"), MISTRAL, ids=[f"{k}-{n}-{s}" for k, n, s in MISTRAL])
@given(data=st.data())
def test_an_id_that_settles_leaves_a_mistral_chain_idle_after_any_prompt(
    kind: str, name: str, skip: bool, data: st.DataObject
) -> None:
    """Tekken's and the ``lang:xx`` stage's ``settle`` are true to their word, from the holds
    prompts leave (a tag start included)."""
    c = other_codec(f"{kind}:{name}", skip)
    chain = c.decoding
    assert isinstance(chain, Chain)
    vocabulary = mistral_objects.vocabulary_of(kind, name)
    starts = st.sampled_from(TAG_STARTS).map(vocabulary.encode)
    prompt = data.draw(st.one_of(mistral_objects.ids_of(kind, name), starts), label="prompt")
    token_id = data.draw(st.integers(0, len(chain.table) - 1), label="id")
    assume(_is_anchor(chain, token_id))
    hold, _ = feed_hold(c, chain.initial, prompt)
    assert isinstance(hold, tuple)
    assert chain.step(hold, token_id)[0] == chain.idle
    assert_same_opening(c, [*prompt, token_id], [])


@pytest.mark.parametrize("kind", ["backend", "vllm"])
def test_an_id_after_a_tag_start_settles_only_where_the_start_is_decided(kind: str) -> None:
    """Every start of a ``lang:xx`` tag, then every id of every short text: where ``settle`` says
    the chain is idle, it is (the start is decided), and the tail opening equals the full feed."""
    c = other_codec(f"{kind}:tekken_240911", True)
    chain = c.decoding
    assert isinstance(chain, Chain)
    vocabulary = mistral_objects.vocabulary_of(kind, "tekken_240911")
    texts = ("g", "ng", ":", "fr", "a", "z", "ang:", "r hello", " x", "Q", "é", "lang:fr")
    anchors = 0
    for start_text in ("", *TAG_STARTS):
        prompt = vocabulary.encode(start_text) if start_text else []
        hold, _ = feed_hold(c, chain.initial, prompt)
        assert isinstance(hold, tuple)
        for text in texts:
            for token_id in vocabulary.encode(text):
                if _is_anchor(chain, token_id):
                    anchors += 1
                    assert chain.step(hold, token_id)[0] == chain.idle, (start_text, text)
                assert_same_opening(c, [*prompt, token_id], [token_id])
    assert anchors


@pytest.mark.parametrize(("name", "skip", "cleanup"), REAL, ids=REAL_IDS)
@given(data=st.data())
def test_an_id_that_settles_leaves_the_chain_idle_after_any_prompt(
    name: str, skip: bool, cleanup: bool | None, data: st.DataObject
) -> None:
    """Each stage's ``settle`` is true to its word, from the holds prompts really leave."""
    c = real_codec(name, skip, cleanup)
    chain = c.decoding
    assert isinstance(chain, Chain)
    prompt = data.draw(edge_prompts(name), label="prompt")
    token_id = data.draw(st.integers(0, len(chain.table) - 1), label="id")
    assume(_is_anchor(chain, token_id))
    hold, _ = feed_hold(c, chain.initial, prompt)
    assert isinstance(hold, tuple)
    assert chain.step(hold, token_id)[0] == chain.idle


@functools.cache
def other_codec(label: str, skip: bool) -> puredetok.Codec:
    kind, name = label.split(":")
    if kind in MISTRAL_KINDS:
        return mistral_objects.codec(kind, name, skip)
    if kind == "window":
        return puredetok.codec_for(tokenizer(name), skip_special_tokens=skip, window=True)
    source = families.family(name) if kind == "class" else synthetic.EXACT[name]()
    return puredetok.codec_for(source, skip_special_tokens=skip)


OTHERS = [
    *(f"class:{name}" for name in families.FAMILIES),
    *(f"synthetic:{name}" for name in synthetic.EXACT),
    "window:qwen3",
    "window:llama2",
    # Mistral's own objects: Tekken (mistral-common's Tekkenizer, vLLM's MistralTokenizer, the
    # tiktoken encoding of its ranks) and its SentencePiece tokenizer.
    *(f"{kind}:tekken_240911" for kind in ("inner", "mistral", "vllm", "tiktoken")),
    *(f"{kind}:spm_v7" for kind in ("inner", "vllm")),
]
MISTRAL_KINDS = ("inner", "backend", "mistral", "vllm", "tiktoken")


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("label", OTHERS)
@given(data=st.data())
def test_the_tail_opening_equals_the_full_feed_on_every_family(
    label: str, skip: bool, data: st.DataObject
) -> None:
    c = other_codec(label, skip)
    kind, name = label.split(":")
    if kind in MISTRAL_KINDS:  # ids aimed at its edges: control ids, broken and split characters
        prompt = data.draw(mistral_objects.ids_of(kind, name, max_size=2 * BATCH + 5), label="prompt")
        output = data.draw(mistral_objects.ids_of(kind, name, max_size=20), label="output")
    else:
        ids = st.integers(0, c.vocab_size - 1)
        prompt = data.draw(st.lists(ids, max_size=2 * BATCH + 5), label="prompt")
        output = data.draw(st.lists(ids, max_size=20), label="output")
    assert_same_opening(c, prompt, output)


class Counted(Sequence[int]):
    """A prompt that records the positions read from it one by one (the ids decoded), and the
    slices taken of it (the ids only checked)."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.positions: set[int] = set()
        self.slices: list[slice] = []

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, at: int) -> int: ...
    @overload
    def __getitem__(self, at: slice) -> Sequence[int]: ...
    def __getitem__(self, at: Any) -> Any:
        got = self.ids[at]
        if isinstance(at, slice):
            self.slices.append(at)
        else:
            self.positions.add(at % len(self.ids))
        return got


LONG = ("The quick brown fox jumps over the lazy dog, then naps. " * 400).strip()


@functools.cache
def long_prompt(name: str) -> list[int]:
    return vocabulary(name).encode(LONG)


@pytest.mark.parametrize("name", TOKENIZERS)
@given(data=st.data())
def test_a_long_prompt_is_read_only_at_its_tail(name: str, data: st.DataObject) -> None:
    """The ids ``start`` decodes: a few of the long text's, then the tail drawn after it (the old
    opening decoded all of them); the ids before are only checked, in one slice."""
    tail = data.draw(edge_prompts(name), label="tail")
    c = codec(name, data.draw(st.booleans(), label="skip"))
    ids = long_prompt(name) + tail
    assert len(ids) > 4000
    counted = Counted(ids)
    state = start(c, counted)
    assert len(counted.positions) <= len(tail) + 8
    (checked,) = counted.slices  # the ids before the tail: one prefix, checked
    assert checked.start is None and len(ids) - len(tail) - 8 <= checked.stop <= len(ids)
    assert state == full_start(c, ids)


def test_a_prompt_of_any_sequence_type_opens_alike() -> None:
    """Lists, tuples, arrays, iterators: the same state, read by index where they allow it."""
    from array import array

    c = codec("qwen3")
    ids = long_prompt("qwen3")[:300] + vocabulary("qwen3").spell("🙂".encode()[:3])
    expected = full_start(c, ids)
    for prompt in (ids, tuple(ids), array("q", ids), iter(ids), Counted(ids)):
        assert start(c, prompt) == expected


def test_a_bad_id_is_refused_with_its_position_wherever_it_is() -> None:
    """A bad id is refused, named by its place in the whole prompt, in the tail that is decoded
    and before it, where the ids are only checked (G7)."""
    c = codec("qwen3")
    ids = long_prompt("qwen3")[:100]
    split = vocabulary("qwen3").spell("🙂".encode()[:3])  # an incomplete character
    bad_ids: list[Any] = [-1, c.vocab_size, True, "7"]
    for bad in bad_ids:
        with pytest.raises(puredetok.InvalidTokenError) as raised:
            start(c, [*ids, bad, *split])
        assert raised.value.position == len(ids)
        for before, after in ((7, 100), (3, 5)):  # a long head checked in C, a short one by a loop
            with pytest.raises(puredetok.InvalidTokenError) as raised:
                start(c, [*ids[:before], bad, *ids[:after]])
            assert raised.value.position == before
    ignoring = puredetok.codec_for(tokenizer("qwen3"), out_of_vocab="ignore")
    past = [*ids[:7], ignoring.vocab_size + 5, *ids]
    assert start(ignoring, past).hold == start(ignoring, ids).hold


def test_the_opening_bench_measures_both_openings_at_every_length() -> None:
    """``python -m benchmarks.opening``'s rows: one per length, the new opening reading a few
    ids of each (it checks that both openings agree before timing them)."""
    from benchmarks.opening import LENGTHS, opening_rows

    rows = opening_rows("Qwen3", tokenizer("qwen3"), repeats=1, rounds=1)
    assert len(rows) == len(LENGTHS)
    for row, length in zip(rows, LENGTHS):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[:2] == ["Qwen3", f"{length:,}"]
        assert 1 <= int(cells[2]) <= 8
