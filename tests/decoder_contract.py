"""Support for the per-module decoder tests (tests/core/test_decoder_*.py, tests/builder/test_pyclass_*.py).

Two things every decoder module must show:

* **Its vectors.** The ``tokenizers`` crate's own test vectors for that decoder (its Rust test
  modules and its Python bindings' tests), written here as data: a list of tokens and the output
  elements ``decode_chain`` gives. Each vector is checked three ways: the installed ``tokenizers``
  library still gives it, puredetok's model of the decoder (its per-token map, then its stage)
  gives the same elements, and a codec built by :func:`puredetok.codec_for` for a tokenizer with
  that decoder streams it exactly (every delta a prefix of the decode, ``feed`` equal to ``step``).
* **The Stage contract** of :mod:`puredetok._core.decoders.base` (:func:`check_stage`): a run
  pushed at once (``push_run``) gives what pushing it value by value gives; holds are hashable,
  equal after a pickle round trip, and never mutated; ``initial`` and ``idle`` hold nothing
  (``flush`` releases nothing from them); what a stage releases plus its ``flush`` is the
  decoder's whole output (checked against an oracle by each module).
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import pickle
from collections.abc import Sequence
from typing import Any

import attrs
from hypothesis import assume
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models

import puredetok
from helpers import assert_streams_exactly
from puredetok._build.config import from_config
from puredetok._core.decoders import Decoder, Stage
from puredetok._core.decoders.base import MISS, map_all

Piece = tuple[Any, bool]
Vector = tuple[list[str], list[str] | str]
"""Tokens, and the output elements the crate's ``decode_chain`` gives for them (where its test
says them) or the decoded text (where it only says that)."""


def elements(pieces: Sequence[Piece]) -> list[Any]:
    """Pieces as the output elements they make: an unglued piece starts an element, a glued one
    continues the last (or starts the first)."""
    out: list[Any] = []
    for value, glued in pieces:
        if glued and out:
            out[-1] = out[-1] + value
        else:
            out.append(value)
    return out


def merged(pieces: Sequence[Piece]) -> list[Piece]:
    """Pieces with every glued piece merged into the one before it (when both are text or both
    bytes): two outputs that merge alike mean the same to every later stage."""
    out: list[Piece] = []
    for value, glued in pieces:
        if glued and out and type(out[-1][0]) is type(value) and isinstance(value, str | bytes):
            out[-1] = (out[-1][0] + value, out[-1][1])
        else:
            out.append((value, glued))
    return out


def models_of(library_decoder: decoders.Decoder) -> list[Decoder]:
    """puredetok's models for a library decoder, read from its own JSON (the config reader)."""
    return from_config(json.loads(library_decoder.__getstate__()))


def decode_chain(decoder: Decoder, tokens: Sequence[str]) -> list[Any]:
    """One decoder's ``decode_chain`` by puredetok's model: each token's map, then the stage (if
    any) over the mapped values, then its flush; the output as elements."""
    values = [decoder.map_token(token, index == 0) for index, token in enumerate(tokens)]
    stage = decoder.stage()
    if stage is None:
        return values
    hold, pieces = stage.initial, []
    for value in values:
        hold, out = stage.push(hold, value, False)
        pieces.extend(out)
    pieces.extend(stage.flush(hold))
    return elements(pieces)


def check_map_tokens(decoder: Decoder, tokens: Sequence[Any]) -> None:
    """The per-token map over a whole vocabulary at once (``map_all``, through the decoder's
    ``map_tokens`` where it has one) is the map of each token, a dropped id (None) staying None."""
    values = [*tokens, None, *tokens]
    for first in (False, True):
        expected = [None if value is None else decoder.map_token(value, first) for value in values]
        assert map_all(decoder, list(values), first) == expected, (decoder, first)


def library_decode(library_decoder: decoders.Decoder, tokens: Sequence[str]) -> str:
    """The installed library's decode; inputs on which the crate panics (tokenizers 0.23's Strip
    with a stop) are not compared."""
    try:
        return str(library_decoder.decode(list(tokens)))
    except BaseException as error:
        if type(error).__name__ != "PanicException":
            raise
        assume(False)
        raise


@functools.cache
def _tokenizer(config: str, pool: tuple[str, ...]) -> tuple[Tokenizer, dict[str, int]]:
    vocab = {token: index for index, token in enumerate(dict.fromkeys(pool))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=pool[0]))
    if config:
        state = json.loads(tokenizer.to_str())
        state["decoder"] = json.loads(config)
        tokenizer = Tokenizer.from_str(json.dumps(state))
    return tokenizer, vocab


def tokenizer_with(
    library_decoder: decoders.Decoder | None, pool: Sequence[str]
) -> tuple[Tokenizer, dict[str, int]]:
    """A ``tokenizers.Tokenizer`` whose vocabulary is ``pool`` (a word-level model: token ``i`` is
    ``pool[i]``) and whose decoder is ``library_decoder`` (none: tokens joined with spaces), with
    its vocabulary by token. Built once per decoder configuration and pool."""
    config = "" if library_decoder is None else library_decoder.__getstate__().decode()
    return _tokenizer(config, tuple(pool))


@functools.cache
def _codec(config: str, pool: tuple[str, ...]) -> puredetok.Codec:
    return puredetok.codec_for(_tokenizer(config, pool)[0])


def codec_with(library_decoder: decoders.Decoder | None, pool: Sequence[str]) -> puredetok.Codec:
    """The codec :func:`puredetok.codec_for` builds for :func:`tokenizer_with`'s tokenizer."""
    config = "" if library_decoder is None else library_decoder.__getstate__().decode()
    return _codec(config, tuple(pool))


def check_vector(library_decoder: decoders.Decoder, tokens: list[str], expected: list[str] | str) -> None:
    """One crate vector, three ways: the library, puredetok's model of the decoder (the same
    elements, or the same text for a chain of several), and an exact codec that streams it."""
    text = expected if isinstance(expected, str) else "".join(expected)
    assert library_decoder.decode(tokens) == text
    chain = models_of(library_decoder)
    for decoder in chain:
        check_map_tokens(decoder, tokens)
    if len(chain) == 1:
        got = decode_chain(chain[0], tokens)
        assert (got if isinstance(expected, list) else "".join(got)) == expected
    c = codec_with(library_decoder, tokens)
    assert c.exact, c.reason
    vocab = tokenizer_with(library_decoder, tokens)[1]
    assert_streams_exactly(c, [vocab[token] for token in tokens], text)


def check_stream_against_library(
    library_decoder: decoders.Decoder | None, pool: Sequence[str], ids: Sequence[int]
) -> None:
    """Random ids over ``pool``: the codec streams exactly what the tokenizer decodes."""
    tokenizer, _ = tokenizer_with(library_decoder, pool)
    c = codec_with(library_decoder, pool)
    assert c.exact, c.reason
    try:
        expected = str(tokenizer.decode(list(ids)))
    except BaseException as error:
        if type(error).__name__ != "PanicException":
            raise
        assume(False)
        raise
    if library_decoder is not None:
        assert expected == library_decode(library_decoder, [pool[i] for i in ids])
    assert_streams_exactly(c, ids, expected)


def pieces_of(values: st.SearchStrategy[Any], max_size: int = 16) -> st.SearchStrategy[list[Piece]]:
    """Lists of pieces: values, each glued to the one before it or not."""
    return st.lists(st.tuples(values, st.booleans()), max_size=max_size)


def immutable(value: Any) -> bool:
    """Whether ``value`` is built only of immutable parts: scalars, strings, bytes, tuples and
    frozensets of them, and frozen ``attrs`` records of them."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return True
    if isinstance(value, tuple | frozenset):
        return all(immutable(part) for part in value)
    if attrs.has(type(value)):
        fields = attrs.fields(type(value))
        try:  # setting a field to the value it has changes nothing, and a frozen record refuses it
            setattr(value, fields[0].name, getattr(value, fields[0].name))
        except attrs.exceptions.FrozenInstanceError:
            return all(immutable(getattr(value, field.name)) for field in fields)
    return False


def _check_hold(hold: Any) -> None:
    assert immutable(hold), hold
    hash(hold)
    assert pickle.loads(pickle.dumps(hold)) == hold
    assert hash(pickle.loads(pickle.dumps(hold))) == hash(hold)


def _runs(pieces: Sequence[Piece], cuts: Sequence[int]) -> list[tuple[list[Any], bool]]:
    """``pieces`` as runs that share a ``glued`` flag, also cut at ``cuts``."""
    runs: list[tuple[list[Any], bool]] = []
    for index, (value, glued) in enumerate(pieces):
        if runs and runs[-1][1] == glued and index not in cuts:
            runs[-1][0].append(value)
        else:
            runs.append(([value], glued))
    return runs


def check_stage(stage: Stage, pieces: Sequence[Piece], cuts: Sequence[int] = ()) -> list[Piece]:
    """Every rule of the Stage contract on one input; returns all the stage released, the final
    flush included (for the caller's oracle).

    * ``initial`` and ``idle`` are hashable and hold nothing: ``flush`` releases nothing from them.
    * ``push`` is pure: the hold passed in is not changed, the new hold is hashable and survives a
      pickle round trip, and pushing the same value to an equal (unpickled) hold gives the same.
    * ``push_run`` over runs of pieces that share ``glued`` (also cut anywhere) leaves the same
      hold after each run as pushing one by one, and releases the same pieces once merged.
    * ``flush`` is pure and releases only what is held: text pushed then flushed is all there is.
    * ``push_lanes``, where the stage has it, from every hold reached here, glued or not, over all
      the values: each value it does not leave to another path (:data:`MISS`) comes out exactly as
      ``push`` gives it (one piece, the hold it says), and it changes neither the hold nor the values.
    * ``ahead`` and ``release``, where the stage has them (:func:`check_ahead`, :func:`check_release`).
    """
    for boundary in (stage.initial, stage.idle):
        _check_hold(boundary)
        assert stage.flush(boundary) == [], boundary
    hold: Any = stage.initial
    released: list[Piece] = []
    holds = []
    for value, glued in pieces:
        before = copy.deepcopy(hold)
        new, out = stage.push(hold, value, glued)
        holds.append(new)
        assert hold == before
        _check_hold(new)
        assert stage.push(pickle.loads(pickle.dumps(hold)), value, glued) == (new, out)
        hold = new
        released.extend(out)
    ran: Any = stage.initial
    ran_out: list[Piece] = []
    position = 0
    for values, glued in _runs(pieces, cuts):
        copied = list(values)
        ran, groups = stage.push_run(ran, values, glued)
        assert values == copied
        for group_values, group_glued in groups:
            ran_out.extend((value, group_glued) for value in group_values)
        position += len(values)
        expected_hold, expected_out = _replay(stage, pieces[:position])
        assert ran == expected_hold, (pieces[:position], ran, expected_hold)
        assert merged(ran_out) == merged(expected_out), (pieces[:position], ran_out, expected_out)
    assert ran == hold
    check_lanes(stage, [stage.initial, stage.idle, *holds], [value for value, _ in pieces])
    check_ahead(stage, pieces)
    check_release(stage, [stage.initial, stage.idle, *holds], [value for value, _ in pieces])
    flushed = stage.flush(hold)
    assert stage.flush(copy.deepcopy(hold)) == flushed
    return released + flushed


def check_lanes(stage: Stage, holds: Sequence[Any], values: Sequence[Any]) -> int:
    """``push_lanes`` (:class:`~puredetok._core.decoders.base.LaneStage`) against ``push``: from each
    hold, glued or not, every value it passes gives what ``push`` gives for that value alone. Returns
    how many values it passed (0 for a stage without it)."""
    push_lanes = getattr(stage, "push_lanes", None)
    if push_lanes is None:
        return 0
    passed = 0
    for hold in holds:
        for glued in (False, True):
            before, copied = copy.deepcopy(hold), list(values)
            lanes = push_lanes(hold, copied, glued)
            assert hold == before and copied == list(values)
            if lanes is None:
                continue
            outs, hold_out, glued_out = lanes
            assert len(outs) == len(values)
            for value, out in zip(values, outs):
                if out is not MISS:
                    assert stage.push(hold, value, glued) == (hold_out, [(out, glued_out)]), (
                        hold,
                        value,
                        glued,
                    )
                    passed += 1
    return passed


def check_ahead(stage: Stage, pieces: Sequence[Piece]) -> None:
    """``ahead`` (:class:`~puredetok._core.decoders.base.AheadStage`), where the stage has it: after
    each piece, what the stage releases glued from there on (the rest of ``pieces``, then its
    flush), joined up to its first unglued piece, begins with ``ahead`` or is a prefix of it."""
    ahead_of = getattr(stage, "ahead", None)
    if ahead_of is None:
        return
    for cut in range(len(pieces) + 1):
        hold, _ = _replay(stage, pieces[:cut])
        ahead = ahead_of(hold)
        rest, out = _replay(stage, pieces[cut:], hold)
        out.extend(stage.flush(rest))
        glued = "".join(value for value, _ in itertools.takewhile(lambda piece: piece[1], out))
        assert glued.startswith(ahead) or ahead.startswith(glued), (pieces, cut, ahead, out)


def check_release(stage: Stage, holds: Sequence[Any], values: Sequence[Any]) -> None:
    """``release`` (:class:`~puredetok._core.decoders.base.ReleasingStage`), where the stage has it:
    from each hold, told each value as what comes next, what it releases then and after gives the
    same elements as the hold itself, whatever follows that fits (a part of the value and the
    end, the value and another, pushed whole or a character at a time, then the end or an unglued
    piece); and the hold it leaves is one the stage takes."""
    release = getattr(stage, "release", None)
    if release is None:
        return
    aheads = sorted({value for value in values if isinstance(value, str) and value})
    for hold in holds:
        for ahead in aheads:
            before = copy.deepcopy(hold)
            released_hold, released = release(hold, ahead)
            assert hold == before and stage.is_hold(released_hold), (hold, ahead, released_hold)
            _check_hold(released_hold)
            follows = [ahead[:cut] for cut in range(len(ahead))] + [ahead + other for other in aheads]
            for text in follows:
                for chars in ([text], list(text)):
                    for end in ([], [("x", False)]):
                        more = [(char, True) for char in chars if char] + end
                        expected = _replay(stage, more, hold)
                        got = _replay(stage, more, released_hold)
                        assert elements(released + got[1] + stage.flush(got[0])) == elements(
                            expected[1] + stage.flush(expected[0])
                        ), (hold, ahead, more, released)


_INITIAL: Any = object()


def _replay(stage: Stage, pieces: Sequence[Piece], hold: Any = _INITIAL) -> tuple[Any, list[Piece]]:
    hold = stage.initial if hold is _INITIAL else hold
    out: list[Piece] = []
    for value, glued in pieces:
        hold, produced = stage.push(hold, value, glued)
        out.extend(produced)
    return hold, out


def check_idle(stage: Stage, plain: Any, reaches_idle: bool = True) -> None:
    """``idle`` is the steady state: a plain value pushed there leaves it there, and (unless the
    module documents otherwise) a plain value pushed from ``initial`` reaches it."""
    hold, _ = stage.push(stage.idle, plain, True)
    assert hold == stage.idle, hold
    hold, _ = stage.push(stage.idle, plain, False)
    assert hold == stage.idle, hold
    if reaches_idle:
        hold, _ = stage.push(stage.initial, plain, False)
        hold, _ = stage.push(hold, plain, True)
        assert hold == stage.idle, hold


def text_of(pieces: Sequence[Piece]) -> str:
    """The text of released pieces."""
    return "".join(str(value) for value, _ in pieces)
