"""``puredetok._build.lanes`` and the bulk maps of ``compile_chain``: the text of every id alone,
found by pushing the whole vocabulary through a chain's stages at once, is what a step and a finish
per id give (the build-time check's model side); the chain's fast table is what a push from the
steady holds gives where every stage stays as it was; and the tables, mapped decoder by decoder over
the whole vocabulary, are each token's map. On every real tokenizer, every class tokenizer and every
synthetic one, both ``skip_special_tokens`` values. (Each stage's ``push_lanes`` against its ``push``
is in the Stage contract: ``check_lanes`` in tests/decoder_contract.py; each decoder's
``map_tokens`` against its ``map_token`` in ``check_map_tokens``, run on the crate's vectors.)"""

from __future__ import annotations

import copy
import functools
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import families
import helpers
import puredetok
import synthetic
from puredetok._build.backend_model import backend_parts
from puredetok._build.compile import compile_chain
from puredetok._build.lanes import texts_alone
from puredetok._build.verify import _model_alone
from puredetok._core.chain import Chain
from puredetok._core.decoders.base import MISS, Piece, finish_holds


def _backend(name: str) -> Any:
    return helpers.tokenizer(name).backend_tokenizer


SOURCES: dict[str, Callable[[], Any]] = {
    **{f"real:{name}": functools.partial(helpers.tokenizer, name) for name in helpers.TOKENIZERS},
    **{f"class:{name}": builder for name, builder in families.FAMILIES.items()},
    **{f"synthetic:{name}": builder for name, builder in synthetic.EXACT.items()},
}
REAL_AND_SYNTHETIC: dict[str, Callable[[], Any]] = {
    **{f"real:{name}": functools.partial(_backend, name) for name in helpers.TOKENIZERS},
    **{f"synthetic:{name}": builder for name, builder in synthetic.EXACT.items()},
}
CASES = [(name, skip) for name in sorted(SOURCES) for skip in (False, True)]
SAMPLE = 3000
"""Ids compared per vocabulary (all of a smaller one): a step per id is the slow way."""


@functools.cache
def _codec(name: str, skip: bool) -> puredetok.Codec:
    return puredetok.codec_for(SOURCES[name](), skip_special_tokens=skip)


def _chain(decoding: Any) -> Chain | None:
    """The codec's chain (a class model may wrap it: Whisper's prompt rule)."""
    while decoding is not None and not isinstance(decoding, Chain):
        decoding = getattr(decoding, "chain", None)
    return decoding


def _sample(codec: puredetok.Codec) -> list[int]:
    size = codec.vocab_size
    ids = set(range(0, size, max(1, size // SAMPLE))) | set(codec.added_ids)
    return sorted(i for i in ids if i < size)


def _from_steady(stages: Sequence[Any], value: Any) -> str | None:
    """The fast table's definition: the value pushed from every stage's idle hold; None if any
    stage then holds something else."""
    if value is None:
        return ""
    pieces: list[Piece] = [(value, False)]
    for stage in stages:
        hold, out = stage.idle, []
        for piece_value, glued in pieces:
            hold, produced = stage.push(hold, piece_value, glued)
            out.extend(produced)
        if hold != stage.idle:
            return None
        pieces = out
    return "".join(text for text, _ in pieces)


def test_every_kind_of_chain_is_here() -> None:
    """The cases below cover chains of no stage, one stage and several, and first-token tables."""
    chains = [chain for name, skip in CASES if (chain := _chain(_codec(name, skip).decoding)) is not None]
    assert {min(len(chain.stages), 2) for chain in chains} == {0, 1, 2}
    assert any(chain.first_table is not None for chain in chains)
    assert any(chain.initial[1:] != chain.idle[1:] for chain in chains)


@pytest.mark.parametrize(("name", "skip"), CASES, ids=[f"{n}-{'skip' if s else 'keep'}" for n, s in CASES])
def test_texts_alone_are_a_step_and_a_finish_per_id(name: str, skip: bool) -> None:
    codec = _codec(name, skip)
    assert codec.exact, codec.reason
    chain = _chain(codec.decoding)
    assert chain is not None
    ids = _sample(codec)
    stepped = []
    for token_id in ids:
        hold, delta = chain.step(chain.initial, token_id)
        stepped.append(delta + chain.finish(hold))
    table = chain.first_table if chain.first_table is not None else chain.table
    lanes = texts_alone(chain.stages, chain.initial[1:], [table[i] for i in ids], flush=True)
    assert lanes == stepped
    everything = _model_alone(chain, codec.vocab_size)
    assert [everything[i] for i in ids] == stepped


@pytest.mark.parametrize(("name", "skip"), CASES, ids=[f"{n}-{'skip' if s else 'keep'}" for n, s in CASES])
def test_the_fast_table_is_a_push_from_the_steady_holds(name: str, skip: bool) -> None:
    chain = _chain(_codec(name, skip).decoding)
    assert chain is not None
    ids = _sample(_codec(name, skip))
    expected = [_from_steady(chain.stages, chain.table[i]) for i in ids]
    assert [chain.fast[i] for i in ids] == expected
    assert texts_alone(chain.stages, chain.idle[1:], [chain.table[i] for i in ids], flush=False) == expected


@pytest.mark.parametrize("name", sorted(REAL_AND_SYNTHETIC))
def test_the_tables_are_each_tokens_map(name: str) -> None:
    """``compile_chain`` maps the whole vocabulary decoder by decoder (``map_all``): the tables are
    what the decoders' ``map_token`` gives token by token."""
    backend = REAL_AND_SYNTHETIC[name]()
    for skip in (False, True):
        parts = backend_parts(backend, skip, None)
        chain = compile_chain(parts.decoders, parts.tokens)
        maps = []
        for decoder in parts.decoders:
            maps.append(decoder)
            if decoder.stage() is not None:
                break
        for first, table in ((False, chain.table), (True, chain.first_table)):
            if table is None:
                continue
            expected = []
            for token in parts.tokens:
                value = token
                if value is not None:
                    for decoder in maps:
                        value = decoder.map_token(value, first)
                expected.append(value)
            assert list(table) == expected


def test_an_empty_chain_and_dropped_ids() -> None:
    """No stages: the values are the texts; a dropped id (None) gives "" (and, flushed, the end of
    the holds)."""
    assert texts_alone((), (), ["a", None, "b"], flush=True) == ["a", "", "b"]
    chain = _chain(_codec("real:llama2", True).decoding)
    assert chain is not None
    dropped = texts_alone(chain.stages, chain.initial[1:], [None], flush=True)
    assert dropped == [finish_holds(chain.stages, chain.initial[1:])] == [""]


def test_miss_is_one_value_that_survives_a_copy() -> None:
    assert pickle.loads(pickle.dumps(MISS)) is MISS
    assert copy.deepcopy(MISS) is MISS
    assert repr(MISS) == "MISS"
