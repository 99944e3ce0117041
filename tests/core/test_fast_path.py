"""The core's one fast path through its public face: ``steady(codec)`` is what ``step_hold`` does
from the steady hold (and every other id's step from it is precomputed), ``feed`` takes the same
path below ``BATCH`` ids and the decoders' runs from there, and a bad id in a ``feed`` of any length
names its position.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import TOKENIZERS, codec, id_lists
from puredetok import InvalidTokenError, feed, finish, start, step
from puredetok._build import with_max_byte_run
from puredetok._core import feed_hold, steady, step_hold
from puredetok._core.chain import Chain
from puredetok._core.stream import BATCH


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("skip", [False, True])
@given(data=st.data())
def test_the_steady_texts_are_what_a_step_from_the_steady_hold_gives(
    name: str, skip: bool, data: st.DataObject
) -> None:
    c = codec(name, skip=skip)
    idle, texts = steady(c)
    assert len(texts) >= c.vocab_size
    for token_id in data.draw(id_lists(name, max_size=20)):
        hold, delta = step_hold(c, idle, token_id)
        if texts[token_id] is not None:
            assert hold is idle and delta == texts[token_id]
        else:
            assert hold is not idle


@pytest.mark.parametrize("name", ["qwen3", "llama2", "distilbert_base_uncased"])
@given(data=st.data())
def test_feed_of_any_length_is_stepping_and_feed_hold_is_feed(name: str, data: st.DataObject) -> None:
    c = codec(name)
    prompt = data.draw(id_lists(name, max_size=6))
    ids = data.draw(st.one_of(id_lists(name, max_size=8), id_lists(name, max_size=3 * BATCH)))
    state = start(c, prompt)
    stepped, texts = state, []
    for token_id in ids:
        stepped, text = step(stepped, token_id)
        texts.append(text)
    fed, text = feed(state, ids)
    assert (fed, text) == (stepped, "".join(texts)) and finish(fed) == finish(stepped)
    assert feed_hold(c, state.hold, ids) == (fed.hold, text)


@pytest.mark.parametrize("size", [2, 5, BATCH - 1, BATCH, 2 * BATCH])
@pytest.mark.parametrize("bad", [-1, 10**9, "7", 3.0, True, None])
def test_a_bad_id_in_a_feed_of_any_length_names_its_position(size: int, bad: object) -> None:
    c = codec("qwen3")
    state = start(c)
    ids: list[object] = [9707, 11, 1879, 0, 198, 40, 1079] * (size // 7 + 1)
    ids = ids[:size]
    position = size // 2
    ids[position] = bad
    with pytest.raises(InvalidTokenError) as raised:
        feed(state, ids)  # type: ignore[arg-type]  # a bad id is the point of the test
    assert raised.value.position == position and raised.value.token_id is bad
    assert feed(state, ids[:position]) == feed(state, ids[:position])  # type: ignore[arg-type]
    assert step(state, 9707) == feed(state, [9707])  # the state offered the bad id is still valid


@pytest.mark.parametrize("name", TOKENIZERS)
def test_a_fresh_state_is_the_steady_hold_when_no_first_token_decodes_otherwise(name: str) -> None:
    """A request's first token takes the fast path whenever it can: a fresh state is the steady
    hold itself unless some id decodes otherwise as the first token (a leading space stripped)."""
    c = codec(name)
    idle, _ = steady(c)
    fresh = start(c).hold
    first_differs = any(step_hold(c, fresh, i) != step_hold(c, idle, i) for i in range(c.vocab_size))
    assert (fresh is idle) is not first_differs


def _without_exits(chain: Chain) -> Chain:
    """The same chain stepping every id through its stages (the precomputed exits emptied)."""
    bare: Chain = copy.copy(chain)
    object.__setattr__(bare, "exits", {})
    return bare


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("cap", [None, 1, 2])
def test_every_step_from_the_steady_hold_is_a_lookup_and_is_the_stages_step(
    name: str, cap: int | None
) -> None:
    c = codec(name) if cap is None else with_max_byte_run(codec(name), cap)
    assert c is not None
    chain = c.decoding
    if not isinstance(chain, Chain):
        return  # a transformers class or the fallback: no chain tables
    leaving = [token_id for token_id, text in enumerate(chain.fast) if text is None]
    assert sorted(chain.exits) == leaving
    bare = _without_exits(chain)
    for token_id in leaving:
        assert chain.exits[token_id] == bare.step(chain.idle, token_id)
        assert chain.step(chain.idle, token_id) is chain.exits[token_id]
