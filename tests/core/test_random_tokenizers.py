"""A search over decoder configurations: random tokenizers (tests/core/random_tokenizers.py) never get a
wrong "exact".

For each random tokenizer and both ``skip_special_tokens`` values, ``codec_for`` either says
``exact False`` with a reason, or its codec streams random ids over the whole vocabulary exactly:
G1 (the text is ``decode``'s), G2 (every prefix's text is a prefix of the final one), G4 (no U+FFFD
the final text lacks), contract C after a prompt, and ``feed`` in random chunks gives the state and
text of stepping.

The CI profile runs a bounded number of tokenizers; a campaign sets ``RANDOM_TOKENIZERS_EXAMPLES``
(how many) and ``RANDOM_TOKENIZERS_LOG`` (a file that gets one JSON line per codec built).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

import puredetok
import random_tokenizers as rt
from puredetok import feed, finish, start, step
from puredetok._build.config import _FIELDS as DECODER_FIELDS
from puredetok._core.decoders.byte_level import byte_alphabet
from puredetok._core.decoders.cleanup import TRANSFORMERS_RULES, apply_rules
from puredetok.testing import Reference, check_continuation, check_ids, core_detokenizer

EXAMPLES = int(os.environ.get("RANDOM_TOKENIZERS_EXAMPLES", "0")) or settings().max_examples
LOG = os.environ.get("RANDOM_TOKENIZERS_LOG")


class Panicked(Exception):
    """The tokenizer's own decode panicked (tokenizers 0.23's Strip with a stop, on some inputs)."""


def _decoder(tokenizer: Any, skip: bool, cleanup: bool | None) -> Any:
    """The tokenizer's decode with these options (for a bare ``tokenizers.Tokenizer``, cleanup is
    transformers' rules applied to its text, as ``codec_for`` documents)."""
    raw = isinstance(tokenizer, Tokenizer)
    options = {} if raw or cleanup is None else {"clean_up_tokenization_spaces": cleanup}

    def decode(ids: list[int]) -> str:
        try:
            text = str(tokenizer.decode(list(ids), skip_special_tokens=skip, **options))
            return apply_rules(TRANSFORMERS_RULES, text) if raw and cleanup else text
        except BaseException as error:
            if type(error).__name__ == "PanicException":
                raise Panicked(str(error)) from None
            raise

    return decode


def _byte_ids(recipe: rt.Recipe) -> dict[int, list[int]]:
    """For each byte, the ids that stand for it alone (``<0xNN>`` and the byte-level alphabet)."""
    vocab = recipe.vocabulary()
    alphabet = byte_alphabet()
    return {b: [vocab[t] for t in (f"<0x{b:02X}>", alphabet[b]) if t in vocab] for b in range(256)}


def id_lists(recipe: rt.Recipe, size: int, max_size: int = 24) -> st.SearchStrategy[list[int]]:
    """Random ids over the whole vocabulary, or over a few ids drawn from it (repeats, runs), mixed
    with byte tokens that spell (part of) a multi-byte character."""
    bytes_ = _byte_ids(recipe)
    chars: list[list[int]] = []
    for char in ("é", "中", "🦩", "\ufffd"):
        data = char.encode()
        if all(bytes_[b] for b in data):
            chars.append([bytes_[b][0] for b in data])
    anywhere = st.integers(0, size - 1)
    spelled = (
        st.tuples(st.sampled_from(chars), st.integers(1, 4)).map(lambda c: c[0][: c[1]]) if chars else None
    )

    def listed(ids: st.SearchStrategy[int]) -> st.SearchStrategy[list[int]]:
        element = ids.map(lambda i: [i])
        if spelled is not None:
            element = st.one_of(element, element, spelled)
        return st.lists(element, max_size=max_size).map(lambda parts: [i for part in parts for i in part])

    few = st.lists(anywhere, min_size=1, max_size=5).flatmap(lambda pool: listed(st.sampled_from(pool)))
    return st.one_of(listed(anywhere), few)


def _log(recipe: rt.Recipe, skip: bool, codec: puredetok.Codec | None, error: str = "") -> None:
    if not LOG:
        return
    decoder = recipe.decoder
    kinds = (
        []
        if decoder is None
        else [d["type"] for d in decoder["decoders"]]
        if decoder["type"] == "Sequence"
        else [decoder["type"]]
    )
    line = {
        "decoders": kinds,
        "model": recipe.model,
        "wrapped": recipe.wrapped,
        "skip": skip,
        "exact": None if codec is None else codec.exact,
        "reason": error or ("" if codec is None else codec.reason)[:300],
    }
    if codec is None or not codec.exact:
        line["recipe"] = repr(recipe)
    with open(LOG, "a", encoding="utf-8") as file:
        file.write(json.dumps(line) + "\n")


def check_codec(
    tokenizer: Any,
    codec: puredetok.Codec,
    skip: bool,
    cleanup: bool | None,
    cases: Sequence[tuple[list[int], list[int], list[int]]],
) -> None:
    """G1, G2, G4 and C for each (prompt, ids, chunk sizes) case, and ``feed`` in those chunks."""
    reference = Reference(_decoder(tokenizer, skip, cleanup), codec)
    opener = core_detokenizer(codec)
    for prompt, ids, chunks in cases:
        try:
            violation = check_ids(opener, reference, ids)
            assert violation is None, str(violation)
            violation = check_continuation(opener, reference, prompt, ids)
            assert violation is None, str(violation)
        except Panicked:
            continue
        stepped, text = start(codec, prompt), ""
        for token_id in ids:
            stepped, delta = step(stepped, token_id)
            text += delta
        fed, fed_text, at = start(codec, prompt), "", 0
        for size in chunks:
            fed, delta = feed(fed, ids[at : at + size])
            fed_text, at = fed_text + delta, at + size
        fed, delta = feed(fed, ids[at:])
        assert (fed, fed_text + delta) == (stepped, text), (prompt, ids, chunks)
        assert finish(fed) == finish(stepped)


def examine(recipe: rt.Recipe, data: st.DataObject | None, cases: Any = None) -> None:
    """Build the recipe's tokenizer and check ``codec_for``'s codecs for it, both skip values, on
    ``cases`` (or cases drawn from ``data``)."""
    try:
        tokenizer = rt.build(recipe)
    except Exception as error:  # a configuration the tokenizers library itself refuses
        assume(False)
        raise AssertionError from error
    size = rt.size_of(tokenizer)
    for skip in (False, True):
        try:
            codec = puredetok.codec_for(
                tokenizer, skip_special_tokens=skip, clean_up_tokenization_spaces=recipe.cleanup
            )
        except puredetok.UnsupportedTokenizerError as error:
            _log(recipe, skip, None, f"unsupported: {error}"[:160])
            continue
        _log(recipe, skip, codec)
        if not codec.exact:
            assert codec.reason, recipe
            continue
        if cases is None:
            assert data is not None
            ids = id_lists(recipe, size)
            chunks = st.lists(st.integers(0, 25), max_size=4)
            cases = data.draw(st.lists(st.tuples(ids, ids, chunks), min_size=1, max_size=6))
        check_codec(tokenizer, codec, skip, recipe.cleanup, cases)


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(recipe=rt.recipes(), data=st.data())
def test_random_tokenizers_are_exact_or_say_why(recipe: rt.Recipe, data: st.DataObject) -> None:
    examine(recipe, data)


@pytest.mark.parametrize("decoder", sorted(rt.DECODERS))
@settings(max_examples=max(3, EXAMPLES // 20), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_each_decoder_type_alone_and_in_sequences(decoder: str, data: st.DataObject) -> None:
    """Every decoder type is met, alone and first in a sequence, whatever the draw."""
    recipe = data.draw(rt.recipes())
    first = data.draw(rt.DECODERS[decoder])
    rest = data.draw(st.lists(rt.one_decoder, max_size=3))
    chosen = {"type": "Sequence", "decoders": [first, *rest]} if rest else first
    examine(rt.Recipe(**{**recipe.__dict__, "decoder": chosen}), data)


@pytest.mark.parametrize("kind", sorted(rt.DECODERS))
@settings(max_examples=5)
@given(data=st.data())
def test_the_search_sets_every_field_of_every_decoder_the_reader_knows(
    kind: str, data: st.DataObject
) -> None:
    """Each decoder type ``codec_for`` reads is drawn, with every field it reads (but Metaspace's
    legacy ``add_prefix_space``, which the library rewrites as ``prepend_scheme`` when it loads)."""
    assert set(DECODER_FIELDS) - {"Sequence"} == set(rt.DECODERS)
    legacy = {"add_prefix_space"} if kind == "Metaspace" else set()
    assert set(data.draw(rt.DECODERS[kind])) == {"type"} | (DECODER_FIELDS[kind] - legacy)


_FILLER = tuple(f"w{i}" for i in range(3000))
"""Pieces enough that the check's sample of sequences misses the two ids that matter."""

REGRESSIONS = {
    "an empty last element before a BPEDecoder": (
        rt.Recipe(
            decoder={
                "type": "Sequence",
                "decoders": [{"type": "BPEDecoder", "suffix": "▁"}, {"type": "BPEDecoder", "suffix": "@@"}],
            },
            pieces=("x@@", "▁", *_FILLER),
            model="WordLevel",
        ),
        [0, 1],
        "x ",
    ),
    "an empty token last before a BPEDecoder": (
        rt.Recipe(
            decoder={
                "type": "Sequence",
                "decoders": [
                    {"type": "BPEDecoder", "suffix": "</w>"},
                    {"type": "BPEDecoder", "suffix": "@@"},
                ],
            },
            pieces=("x@@", "", *_FILLER),
            model="WordLevel",
        ),
        [0, 1],
        "x ",
    ),
    "an empty first element before a Metaspace": (
        rt.Recipe(
            decoder={
                "type": "Sequence",
                "decoders": [
                    {"type": "BPEDecoder", "suffix": "@@"},
                    {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
                ],
            },
            pieces=("", "▁a", *_FILLER),
            model="WordLevel",
        ),
        [0, 1],
        " a",
    ),
    "an empty element through a Metaspace stage": (
        rt.Recipe(
            decoder={
                "type": "Sequence",
                "decoders": [
                    {"type": "BPEDecoder", "suffix": "</w>"},
                    {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
                    {"type": "BPEDecoder", "suffix": "@@"},
                ],
            },
            pieces=("x@@", "", *_FILLER),
            model="WordLevel",
        ),
        [0, 1],
        "x ",
    ),
    "an element a Replace stage empties": (
        rt.Recipe(
            decoder={
                "type": "Sequence",
                "decoders": [
                    {"type": "BPEDecoder", "suffix": "</w>"},
                    {"type": "Replace", "pattern": {"String": "ab"}, "content": ""},
                    {"type": "BPEDecoder", "suffix": "@@"},
                ],
            },
            pieces=("x@@", "ab", *_FILLER),
            model="WordLevel",
        ),
        [0, 1],
        "x ",
    ),
}
"""Found by the search: a BPEDecoder, Metaspace or Replace stage dropped an element that gave no
text (the suffix alone as the last token, an empty token, a token the replacement empties), so the
stage after it saw the element before as the last one (its suffix removed instead of made a space)
or the one after as the first (Metaspace's leading space removed)."""


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regressions_found_by_the_search(name: str) -> None:
    recipe, ids, text = REGRESSIONS[name]
    tokenizer = rt.build(recipe)
    assert tokenizer.decode(ids) == text
    codec = puredetok.codec_for(tokenizer)
    assert codec.exact, codec.reason
    examine(recipe, None, [([], ids, [1]), (ids[:1], ids[1:], [])])


def test_a_campaign_log_has_one_line_per_codec(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``RANDOM_TOKENIZERS_LOG``: one JSON line per codec built, with the recipe of a refused one."""
    import test_random_tokenizers as module

    log = tmp_path / "campaign.jsonl"
    monkeypatch.setattr(module, "LOG", str(log))
    regex = {"type": "Replace", "pattern": {"Regex": "a+"}, "content": "b"}
    for decoder in ({"type": "Fuse"}, regex):
        examine(rt.Recipe(decoder=decoder, pieces=("a", "b"), model="WordLevel"), None, [([], [0, 1], [])])
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert [(line["decoders"], line["skip"], line["exact"]) for line in lines] == [
        (["Fuse"], False, True),
        (["Fuse"], True, True),
        (["Replace"], False, False),
        (["Replace"], True, False),
    ]
    assert "Regex" in lines[2]["reason"] and lines[2]["recipe"].startswith("Recipe(")
