"""Mistral's tokenizers: the five files mistral-common installs, each as mistral-common's own object
and as ``transformers``' ``MistralCommonBackend`` (ten objects), plus mistral-common's
``MistralTokenizer``, a wrapper shaped as vLLM's ``MistralTokenizer``, and ``tiktoken.Encoding``
objects built from the Tekken files' ranks.

Every guarantee is a property over ids from the whole vocabulary of each file (half of them edge
ids: control ids, byte tokens, ids that decode alone to nothing or to U+FFFD), the ids of real and
random texts, and runs of byte tokens that split characters, with ``skip_special_tokens`` both ways,
each against the object's own decode.
"""

from __future__ import annotations

import copy
import functools
import json
import pickle
from pathlib import Path
from typing import Any, cast

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer

import mistral_objects as mo
import puredetok
from benchmarks.mistral import installed_tekken, tekken_section
from decoder_contract import check_stage, text_of
from holding import Tally, can_change, ending_with, holding_tails
from mistral_objects import codec, ids_of
from mistral_objects import vocabulary_of as vocabulary
from puredetok import DecodeState, InvalidTokenError, feed, finish, start, step
from puredetok._build.pyclasses.mistral import mistral_tokenizer_of
from puredetok._core import continuation_text
from puredetok._core.pyclasses.mistral import LangTagStage
from puredetok.cli import main
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._eos import eos_token_ids
from puredetok.serving._loading import TokenizerLoadError, is_mistral_file, load_tokenizer
from puredetok.serving._messages import DetokenizeMsg, Opening, SamplingParams

NAMES = tuple(mo.FILES)
OBJECTS = [(kind, name) for name in NAMES for kind in ("inner", "backend")]
OBJECTS += [(kind, name) for name in ("tekken_240911", "spm_v7") for kind in ("mistral", "vllm")]
OBJECTS += [("tiktoken", "tekken_240911")]
CASES = [(kind, name, skip) for kind, name in OBJECTS for skip in (False, True)]
IDS = [f"{kind}-{name}-{'skip' if skip else 'keep'}" for kind, name, skip in CASES]
FEWER = settings(max_examples=max(10, settings().max_examples // 3))


@pytest.mark.parametrize(("kind", "name", "skip"), CASES, ids=IDS)
def test_every_object_gets_an_exact_codec(kind: str, name: str, skip: bool) -> None:
    c = codec(kind, name, skip)
    assert c.exact, c.reason
    family = "tekken" if name.startswith("tekken") else "mistral_sentencepiece"
    assert c.family == ("tiktoken" if kind == "tiktoken" else family)
    assert c.vocab_size == vocabulary(kind, name).size


@pytest.mark.parametrize(("kind", "name", "skip"), CASES, ids=IDS)
@FEWER
@given(data=st.data())
def test_g1_g2_g4_g6(kind: str, name: str, skip: bool, data: st.DataObject) -> None:
    """Every prefix's text is a prefix of the decode of the ids and of a longer sequence (G2, G4);
    with finish it is the decode (G1); any chunking and every saved or copied state agree (G6)."""
    c, decode = codec(kind, name, skip), mo.decoder(kind, name, skip)
    ids = data.draw(ids_of(kind, name))
    more = data.draw(ids_of(kind, name, max_size=6))
    full, later = decode(ids), decode(ids + more)
    state, emitted = start(c), ""
    for index, token_id in enumerate(ids):
        state, delta = step(state, token_id)
        emitted += delta
        assert full.startswith(emitted) and later.startswith(emitted), (ids[: index + 1], emitted, full)
        assert DecodeState.from_bytes(c, state.to_bytes()) == state
    assert emitted + finish(state) == full
    cuts = sorted(data.draw(st.lists(st.integers(0, len(ids)), max_size=4)))
    chunked, texts, last = start(c), [], 0
    for cut in [*cuts, len(ids)]:
        chunked, text = feed(chunked, ids[last:cut])
        texts.append(text)
        last = cut
    assert chunked == state and "".join(texts) == emitted
    middle = data.draw(st.integers(0, len(ids)))
    saved, _ = feed(start(c), ids[:middle])
    for clone in (pickle.loads(pickle.dumps(saved)).resume(c), copy.copy(saved), copy.deepcopy(saved)):
        assert clone == saved and feed(clone, ids[middle:]) == feed(saved, ids[middle:])


@pytest.mark.parametrize(("kind", "name", "skip"), CASES, ids=IDS)
@FEWER
@given(data=st.data())
def test_contract_c(kind: str, name: str, skip: bool, data: st.DataObject) -> None:
    """After a prompt, the output is the decode of prompt + output after what the prompt showed."""
    c, decode = codec(kind, name, skip), mo.decoder(kind, name, skip)
    prompt, output = data.draw(ids_of(kind, name)), data.draw(ids_of(kind, name))
    state, text = feed(start(c, prompt), output)
    assert text + finish(state) == continuation_text(decode(prompt), decode(prompt + output))


def _byte_id(kind: str, name: str, byte: int) -> int:
    return vocabulary(kind, name).pieces[bytes([byte])]


@functools.cache
def _witnesses(kind: str, name: str) -> tuple[tuple[int, ...], ...]:
    """Continuations that can change held text: continuation bytes (one, two, three), and the
    letters of Voxtral's tag."""
    v = vocabulary(kind, name)
    conts = [_byte_id(kind, name, b) for b in (0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xA9, 0xB8, 0xBF)]
    runs = [(a,) for a in conts] + [(a, b) for a in conts for b in conts[:3]] + [(a, a, a) for a in conts]
    # Spelled in byte tokens: SentencePiece's "fr" would start with a space.
    letters = [
        tuple(_byte_id(kind, name, b) for b in text)
        for text in (b"ang:fr", b"ng:fr", b"g:fr", b":fr", b"fr", b"r")
    ]
    return (*runs, *letters, *(tuple(v.encode(text)) for text in ("fr", "r")))


@functools.cache
def _tails(kind: str, name: str, skip: bool) -> tuple[tuple[int, ...], ...]:
    """Tails that leave something held: a character's first bytes, Voxtral's tag cut short."""
    v, c = vocabulary(kind, name), codec(kind, name, skip)
    starts = [(0xC3,), (0xE2,), (0xE2, 0x82), (0xF0,), (0xF0, 0x9F), (0xF0, 0x9F, 0xA6), (0xE4, 0xB8)]
    candidates = [[_byte_id(kind, name, b) for b in s] for s in starts]
    candidates += [v.encode(text) for text in ("lang:", "lang:f", "lan", "l")]
    return holding_tails(c, candidates)


@pytest.mark.parametrize(("kind", "name", "skip"), CASES, ids=IDS)
def test_g3_what_is_held_can_still_change(kind: str, name: str, skip: bool) -> None:
    """Whatever is held could still change: an incomplete character (at most 3 bytes), or the start
    of a text that may still be Voxtral's tag. The ids end with a tail that holds something; a
    codec with no such tail (SentencePiece's raw pieces, KEEP) never holds anything."""
    c = codec(kind, name, skip)
    tails = _tails(kind, name, skip)
    assert bool(tails) is not (name.startswith("spm") and not skip)
    tally = Tally()

    @FEWER
    @given(ids=ending_with(c, ids_of(kind, name), [], tails))
    def held_can_change(ids: list[int]) -> None:
        held, changes = can_change(c, ids, _witnesses(kind, name))
        tally.count(held)
        assert changes, (ids, held)
        if not tails:
            assert held == ""

    held_can_change()
    if tails:
        tally.assert_mostly_held(f"{kind} {name} skip={skip}")


@pytest.mark.parametrize(("kind", "name", "skip"), CASES, ids=IDS)
def test_g5_state_stays_small(kind: str, name: str, skip: bool) -> None:
    """After 1,500 ids the state is no bigger than after 200: one id repeated (control ids, bytes,
    ids that decode to nothing) and the ids of real text repeated."""
    c, decode = codec(kind, name, skip), mo.decoder(kind, name, skip)
    v = vocabulary(kind, name)
    streams = {f"id {i}": [i] * 1500 for i in v.edge_ids[:: max(1, len(v.edge_ids) // 8)]}
    streams["text"] = (v.encode(mo.TEXTS[0]) * 100)[:1500]
    for label, ids in streams.items():
        short, _ = feed(start(c), ids[:200])
        state, text = feed(start(c), ids)
        assert len(pickle.dumps(state.hold)) <= max(len(pickle.dumps(short.hold)) * 2, 512), label
        assert text + finish(state) == decode(ids), label


@pytest.mark.parametrize(("kind", "name", "skip"), CASES, ids=IDS)
@pytest.mark.parametrize("bad", [-1, 2**40, 1.5, "3", None, True])
def test_g7_bad_ids_raise_and_lose_nothing(kind: str, name: str, skip: bool, bad: object) -> None:
    c, decode = codec(kind, name, skip), mo.decoder(kind, name, skip)
    good = list(vocabulary(kind, name).edge_ids[:6])
    state, before = feed(start(c), good)
    with pytest.raises(InvalidTokenError, match=str(c.vocab_size)):
        step(state, cast(Any, bad))
    with pytest.raises(InvalidTokenError):
        feed(state, [*good, cast(Any, bad)])
    with pytest.raises(InvalidTokenError, match=str(c.vocab_size)):
        step(state, c.vocab_size)
    state, after = feed(state, good)
    assert before + after + finish(state) == decode(good + good)


@pytest.mark.parametrize(
    ("kind", "name"), [("inner", "tekken_240911"), ("inner", "spm_v3"), ("tiktoken", "tekken_240911")]
)
def test_g7_their_decode_refuses_ids_past_the_vocabulary_so_ignore_is_refused(kind: str, name: str) -> None:
    """mistral-common's and tiktoken's decodes raise on an id past the vocabulary: out_of_vocab="ignore"
    would differ from them, and codec_for says so."""
    size = codec(kind, name, True).vocab_size
    with pytest.raises(Exception):  # noqa: B017 - KeyError, IndexError or a tiktoken error
        mo.decoder(kind, name, True)([size])
    with pytest.raises(ValueError, match="out_of_vocab='ignore'"):
        puredetok.codec_for(mo.obj(kind, name), skip_special_tokens=True, out_of_vocab="ignore")


@pytest.mark.parametrize("name", NAMES)
def test_voxtral_language_tag_is_removed_only_at_the_start(name: str) -> None:
    """MistralCommonBackend with skip_special_tokens removes a leading "lang:xx" from the text; the
    codec holds the start until it knows."""
    v = vocabulary("backend", name)
    for text in ("lang:fr Bonjour", "lang:f", "lang:", "langue", "Blang:fr", "lang:FR x", "lang:frx"):
        for skip in (False, True):
            c, decode = codec("backend", name, skip), mo.decoder("backend", name, skip)
            ids = v.encode(text)
            state, emitted = start(c), ""
            for token_id in ids:
                state, delta = step(state, token_id)
                emitted += delta
                assert decode(ids).startswith(emitted)
            assert emitted + finish(state) == decode(ids), (text, skip)


@pytest.mark.parametrize("name", ["tekken_240911", "spm_v7"])
def test_cleanup_of_the_backend_is_modelled(name: str) -> None:
    """MistralCommonBackend's clean_up_tokenization_spaces=True: transformers' cleanup on its text."""
    tok = mo.backend(name)
    v = vocabulary("backend", name)
    for skip in (False, True):
        c = puredetok.codec_for(tok, skip_special_tokens=skip, clean_up_tokenization_spaces=True)
        assert c.exact and "cleanup" in c.reason, c.reason
        for text in mo.TEXTS:
            ids = v.encode(text + " do n't , . ?")
            state, emitted = feed(start(c), ids)
            expected = tok.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=True)
            assert emitted + finish(state) == expected


def test_wrapper_paths_are_the_documented_ones() -> None:
    """mistral_tokenizer_of follows the documented attribute paths to the inner tokenizer."""
    inner = mo.inner("tekken_240911")
    assert mistral_tokenizer_of(inner) == (inner, ())
    for kind, path in (
        ("mistral", ("instruct_tokenizer", "tokenizer")),
        ("backend", ("tokenizer", "instruct_tokenizer", "tokenizer")),
        ("vllm", ("tokenizer",)),
    ):
        found = mistral_tokenizer_of(mo.obj(kind, "tekken_240911"))
        assert found is not None and found[1] == path
    assert mistral_tokenizer_of(object()) is None
    assert mistral_tokenizer_of(mo.tekken_encoding("tekken_240911")) is None


def test_a_replaced_decoding_method_is_refused_as_for_any_class() -> None:
    """mistral-common's and tiktoken's objects are refused as codec_for refuses a ``transformers``
    class that changes decoding, with the same reasons (``_build.reading.override``'s)."""
    tekken = mo.inner("tekken_240911")

    class Pieces(SentencePieceTokenizer):
        def id_to_piece(self, token_id: int) -> str:
            return str(super().id_to_piece(token_id))

    class Bytes(tiktoken.Encoding):
        def decode_bytes(self, *args: Any, **kwargs: Any) -> bytes:
            return super().decode_bytes(*args, **kwargs)

    plain = copy.copy(tekken)
    plain.decode = tekken.decode
    encoding = mo.tekken_encoding("tekken_240911")
    ranks = cast(Any, encoding)._mergeable_ranks
    bytes_encoding = Bytes(name="b", pat_str=encoding._pat_str, mergeable_ranks=ranks, special_tokens={})
    for obj, why in (
        (plain, "decode set on the object"),
        (Pieces(mo.path("spm_v3")), "Pieces overrides id_to_piece"),
        (bytes_encoding, "Bytes overrides decode_bytes"),
    ):
        assert puredetok.codec_for(obj).reason == f"not modelled exactly: {why}"


@given(
    texts=st.lists(st.text(alphabet="lang:frxL ", max_size=4), max_size=6), cuts=st.lists(st.integers(0, 6))
)
def test_lang_tag_stage_contract(texts: list[str], cuts: list[int]) -> None:
    import re

    released = check_stage(LangTagStage(), [(t, True) for t in texts], cuts)
    assert text_of(released) == re.sub(r"^lang:[a-z]{2}", "", "".join(texts))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("skip", [False, True])
def test_explain_takes_a_mistral_common_file(
    capsys: pytest.CaptureFixture[str], name: str, skip: bool
) -> None:
    """`puredetok explain --tokenizer` with a Tekken .json or a mistral-common .model file: loaded as
    MistralCommonBackend, streamed exactly, control ids and split characters included."""
    text = "lang:fr héllo 😀🦩 [INST] 鱻"
    argv = ["explain", text, "--tokenizer", str(mo.path(name)), "--add-special-tokens", "--json"]
    code = main(argv + (["--skip-special-tokens"] if skip else []))
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["equal"] is True and report["codec"]["exact"] is True
    ids = [row["id"] for row in report["tokens"]]
    assert report["streamed"] == mo.decoder("backend", name, skip)(ids)


def test_loading_a_mistral_common_file_that_is_not_one_is_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "tekken_broken.json"
    broken.write_text("{}", encoding="utf-8")
    assert is_mistral_file(broken) and is_mistral_file(tmp_path / "tokenizer.model.v7m1")
    assert not is_mistral_file(tmp_path / "tokenizer.json")
    with pytest.raises(TokenizerLoadError, match="as a mistral-common file"):
        load_tokenizer(broken)


def test_the_bench_section_measures_tekken_beside_qwen3_side_by_side() -> None:
    """The section runs (a short trace, two repeats) and reports ratios with their ranges, and the
    share of steps off the fast path on each trace."""
    tekken = installed_tekken()
    assert tekken is not None
    results = tekken_section(load_tokenizer(), tekken, tokens=300, repeats=2)
    ratios = [r for r in results if r.target]
    assert len(ratios) == 4
    for r in ratios:
        assert r.repeats == 2 and r.low is not None and r.ratio is not None and r.low <= r.ratio
    shares = {r.name: r.ratio or 0.0 for r in results if "share" in r.name}
    assert shares["Tekken, Latin-script: share of steps off the fast path"] == 0.0
    assert shares["Tekken, mixed-script: share of steps off the fast path"] > 0.0


@pytest.mark.parametrize("kind", ["inner", "mistral", "backend", "vllm"])
@pytest.mark.parametrize("name", ["tekken_240911", "spm_v7"])
def test_eos_ids_of_every_mistral_object(kind: str, name: str) -> None:
    """The stop layer's EOS ids reach the inner tokenizer's eos_id through any wrapper."""
    assert eos_token_ids(mo.obj(kind, name)) == {mo.inner(name).eos_id}


@pytest.mark.parametrize(("kind", "name", "skip"), CASES, ids=IDS)
def test_real_text_after_a_real_chat_prompt(kind: str, name: str, skip: bool) -> None:
    """Each real text as a model's output after mistral-common's own encoding of a chat (control
    tokens, emoji, split characters): streamed one id at a time and fed in one call, it is the
    decode of prompt + output after what the prompt showed (contract C); without a prompt, the decode."""
    c, decode = codec(kind, name, skip), mo.decoder(kind, name, skip)
    v = vocabulary(kind, name)
    prompt = mo.chat_prompt(name) if kind != "tiktoken" else v.encode(mo.TEXTS[2])
    for text in mo.TEXTS:
        output = v.encode(text)
        state, emitted = start(c, prompt), ""
        for token_id in output:
            state, delta = step(state, token_id)
            emitted += delta
        expected = continuation_text(decode(prompt), decode(prompt + output))
        assert emitted + finish(state) == expected
        fed, text_fed = feed(start(c, prompt), output)
        assert fed == state and text_fed == emitted
        alone, streamed = feed(start(c), output)
        assert streamed + finish(alone) == decode(output)


@pytest.mark.parametrize("kind", ["inner", "mistral", "backend", "vllm"])
@pytest.mark.parametrize("name", ["tekken_240911", "spm_v7"])
@pytest.mark.parametrize("skip", [False, True])
def test_the_detokenize_manager_serves_every_mistral_object(kind: str, name: str, skip: bool) -> None:
    """A request through the batched manager: a chat prompt, a real text in two messages, then the
    EOS id, which stops it (its text dropped, as a stop token's)."""
    manager = DetokenizeManager(mo.obj(kind, name))
    prompt, output = tuple(mo.chat_prompt(name)), tuple(vocabulary(kind, name).encode(mo.TEXTS[0]))
    opening = Opening(prompt_ids=prompt, params=SamplingParams(skip_special_tokens=skip))
    replies = manager.handle([DetokenizeMsg("r", output[:5], open=opening)])
    replies += manager.handle([DetokenizeMsg("r", (*output[5:], mo.inner(name).eos_id))])
    decode = mo.decoder(kind, name, skip)
    expected = continuation_text(decode(list(prompt)), decode(list(prompt + output)))
    assert "".join(reply.incremental_output for reply in replies) == expected
    assert replies[-1].finished and replies[-1].finish_reason == "stop"
