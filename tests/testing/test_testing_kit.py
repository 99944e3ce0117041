"""puredetok.testing: the conformance kit passes our core on real tokenizers, and finds the exact,
minimal counterexamples of two naive detokenizers (per-token decode, the two-window algorithm
without a final flush) and of transformers' own TextStreamer."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy
import pytest
import tokenizers
import transformers
from hypothesis import find, given, settings
from hypothesis import strategies as st
from tokenizers.models import WordLevel

import synthetic
from helpers import CLEANED, CLEANUP_OBJECTS, cleanup_object, codec, continuation, tokenizer, vocabulary
from puredetok import InvalidTokenError, UnsupportedTokenizerError, feed, start
from puredetok.cli._measure import TwoWindow
from puredetok.errors import OptionTypeError
from puredetok.testing import (
    CONTINUATION_GUARANTEES,
    STREAMING_GUARANTEES,
    ConformanceError,
    ContinuingFactory,
    CoreStream,
    DetokenizerFactory,
    Guarantee,
    Reference,
    Violation,
    assert_conforms,
    assert_continues,
    check_continuation,
    check_ids,
    core_detokenizer,
    find_continuation_violation,
    find_violation,
    from_step_function,
    reference_for,
    strategies,
)
from puredetok.testing.strategies import Vocabulary

R = "\ufffd"
G1, G2, G3, G4 = Guarantee.EXACT, Guarantee.PREFIX_SAFE, Guarantee.EAGER, Guarantee.NO_TRANSIENT_REPLACEMENT
C = Guarantee.CONTINUATION

Summary = tuple[Guarantee, tuple[int, ...], int, bool, str, str]


def summary(found: Violation | None) -> Summary | None:
    """Everything but the free-text detail."""
    if found is None:
        return None
    return (found.guarantee, found.ids, found.position, found.at_finish, found.emitted, found.expected)


@functools.cache
def reference(name: str, skip: bool = False) -> Reference:
    return reference_for(tokenizer(name), skip_special_tokens=skip, codec=codec(name, skip))


def per_token(name: str) -> DetokenizerFactory:
    """The naive detokenizer: every id decoded on its own."""
    decode = reference(name).decode
    return from_step_function(lambda ids_so_far, new_id: decode([new_id]))


class TwoWindowWithoutFlush:
    """The engines' two-window algorithm (puredetok bench's baseline), which has no final flush."""

    def __init__(self, name: str) -> None:
        self.window = TwoWindow(reference(name).decode)

    def step(self, token_id: int) -> str:
        return self.window.step(token_id)

    def finish(self) -> str:
        return ""


def two_window(name: str) -> DetokenizerFactory:
    return lambda: TwoWindowWithoutFlush(name)


class TransformersTextStreamer:
    """transformers' own TextStreamer, fed one id per put() as generate() feeds it."""

    def __init__(self, name: str) -> None:
        self.sent: list[str] = []
        self.streamer = transformers.TextStreamer(tokenizer(name), skip_prompt=True)
        self.streamer.on_finalized_text = self._capture
        self.streamer.put(numpy.array([[0]]))  # the prompt, skipped

    def _capture(self, text: str, stream_end: bool = False) -> None:
        self.sent.append(text)

    def _new_text(self, call: Callable[[], Any]) -> str:
        before = len(self.sent)
        call()
        return "".join(self.sent[before:])

    def step(self, token_id: int) -> str:
        return self._new_text(lambda: self.streamer.put(numpy.array([token_id])))

    def finish(self) -> str:
        return self._new_text(self.streamer.end)


def split(name: str, *texts: str) -> st.SearchStrategy[list[int]]:
    return strategies.split_characters(vocabulary(name), texts)


# The core passes, on every decoder family.

CORE_CASES = [
    ("qwen3", False),
    ("qwen3", True),
    ("llama3", False),
    ("llama2", False),
    ("llama2", True),
    ("phi3_mini", False),
    ("t5_small", False),
    ("distilbert_base_uncased", True),
]


@pytest.mark.parametrize(("name", "skip"), CORE_CASES)
def test_the_core_conforms(name: str, skip: bool) -> None:
    ref = reference(name, skip)
    ids = strategies.token_ids(vocabulary(name))
    assert_conforms(core_detokenizer(ref.codec), ref, ids, guarantees={G1, G2, G3, G4})


# The naive detokenizers: the exact minimal counterexamples.


def test_per_token_decode_sends_a_transient_replacement_for_a_split_ideograph() -> None:
    # A test vector: "鱻" is ids 100024 119 in Qwen3; alone, 100024 decodes to U+FFFD.
    found = find_violation(per_token("qwen3"), reference("qwen3"), split("qwen3", "鱻"))
    assert summary(found) == (G4, (100024, 119), 1, False, R, "鱻")
    assert found is not None and "where the final decode has '鱻'" in found.detail


def test_per_token_decode_breaks_a_split_box_drawing_corner() -> None:
    # The sglang-jax field case: "┌" split over two GPT-2 tokens.
    found = find_violation(per_token("gpt2"), reference("gpt2"), split("gpt2", "┌──┐"))
    assert summary(found) == (G4, (6552, 234), 1, False, R, "┌")


def test_per_token_decode_loses_sentencepiece_spaces() -> None:
    # transformers issue 22710: decoding token by token drops the space of "▁world".
    found = find_violation(per_token("llama2"), reference("llama2"), split("llama2", "Hello world"))
    assert summary(found) == (G2, (15043, 3186), 2, False, "Helloworld", "Hello world")
    assert found is not None and "character 5 is 'w'" in found.detail


def test_per_token_decode_loses_wordpiece_spaces() -> None:
    found = find_violation(
        per_token("distilbert_base_uncased"),
        reference("distilbert_base_uncased"),
        split("distilbert_base_uncased", "日本"),
    )
    assert summary(found) == (G2, (1864, 1876), 2, False, "日本", "日 本")


def test_two_window_without_flush_loses_an_incomplete_tail() -> None:
    # "the tail of a stream is lost when it ends on an incomplete character"
    found = find_violation(two_window("qwen3"), reference("qwen3"), split("qwen3", "鱻"))
    assert summary(found) == (G1, (100024,), 1, True, "", R)
    assert found is not None and found.detail == "the stream lost its last 1 characters '\ufffd'"


def test_two_window_sends_a_byte_fallback_character_before_a_later_byte_spoils_it() -> None:
    # A run of <0xNN> tokens is text only if the whole run is valid UTF-8: the fifth byte turns
    # the flamingo already sent into five U+FFFD.
    found = find_violation(two_window("llama2"), reference("llama2"), split("llama2", "🦩🦩"))
    assert summary(found) == (G2, (243, 162, 169, 172, 243), 4, False, "🦩", R * 5)
    assert found is not None and "before it was certain" in found.detail


def test_two_window_sends_a_space_that_cleanup_removes() -> None:
    # turbo-fieldfare PR 118 / PaddleNLP PR 9010: under clean_up_tokenization_spaces, " ." becomes ".".
    found = find_violation(two_window("t5_small"), reference("t5_small"), split("t5_small", "Hello ."))
    assert summary(found) == (G2, (8774, 3, 5), 2, False, "Hello ", "Hello.")


def test_the_broad_search_finds_the_same_failures_on_random_ids() -> None:
    for name, factory in (("qwen3", per_token("qwen3")), ("llama2", two_window("llama2"))):
        ref = reference(name)
        found = find_violation(factory, ref, strategies.token_ids(vocabulary(name)))
        assert found is not None
        assert summary(check_ids(factory, ref, found.ids)) == summary(found)  # it reproduces
        for index in range(len(found.ids)):  # and no id can be removed
            shorter = found.ids[:index] + found.ids[index + 1 :]
            again = check_ids(factory, ref, shorter)
            assert again is None or again.guarantee is not found.guarantee
    assert summary(
        find_violation(per_token("qwen3"), reference("qwen3"), strategies.token_ids(vocabulary("qwen3")))
    ) == (
        G4,
        (100024, 119),
        1,
        False,
        R,
        "鱻",
    )


# transformers' TextStreamer, checked by the kit.


def test_transformers_text_streamer_waits_for_a_space_after_symbols() -> None:
    found = find_violation(
        lambda: TransformersTextStreamer("qwen3"),
        reference("qwen3"),
        split("qwen3", "┌──┐"),
        guarantees={G3},
    )
    assert summary(found) == (G3, (145430,), 1, False, "", "┌")
    assert found is not None and "1 characters that no later id can change are still unsent" in found.detail


def test_transformers_text_streamer_loses_text_under_cleanup() -> None:
    found = find_violation(
        lambda: TransformersTextStreamer("t5_small"), reference("t5_small"), split("t5_small", "Hello .")
    )
    assert summary(found) == (G2, (8774, 3, 5), 2, False, "Hello ", "Hello.")


# The checks themselves.


def test_a_detokenizer_that_holds_everything_is_exact_but_not_eager() -> None:
    ref = reference("qwen3")
    lazy = from_step_function(lambda ids_so_far, new_id: "", lambda ids: ref.decode(list(ids)))
    ids = split("qwen3", "鱻", "🦩")
    assert find_violation(lazy, ref, ids) is None
    assert summary(find_violation(lazy, ref, ids, guarantees={G3})) == (G3, (119,), 1, False, "", R)
    assert find_violation(lazy, ref, ids, guarantees={G3}, max_lag=2) is None


def test_assert_conforms_raises_an_assertion_error_with_the_violation() -> None:
    with pytest.raises(ConformanceError) as raised:
        assert_conforms(per_token("qwen3"), reference("qwen3"), split("qwen3", "鱻"))
    assert isinstance(raised.value, AssertionError)
    assert summary(raised.value.violation) == (G4, (100024, 119), 1, False, R, "鱻")
    message = str(raised.value)
    assert message.startswith("G4 no transient replacement broken after 1 of 2 ids")
    assert "[100024, 119]" in message


def test_check_ids_reports_a_crash_as_g1() -> None:
    class Crashing:
        def step(self, token_id: int) -> str:
            raise RuntimeError("Invalid prefix encountered")

        def finish(self) -> str:
            return ""

    found = check_ids(Crashing, reference("qwen3"), [100024, 119])
    assert summary(found) == (G1, (100024, 119), 1, False, "", "鱻")
    assert (
        found is not None and found.detail == "step(100024) raised RuntimeError: Invalid prefix encountered"
    )


def test_check_ids_rejects_ids_outside_the_vocabulary() -> None:
    ref = reference("qwen3")
    with pytest.raises(InvalidTokenError):
        check_ids(core_detokenizer(ref.codec), ref, [5, ref.vocab_size])


def test_g3_needs_an_exact_codec() -> None:
    words = tokenizers.Tokenizer(WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))

    class NoBackend:
        """A tokenizer without a tokenizers backend: only the generic window codec fits it."""

        def decode(
            self,
            ids: list[int],
            /,
            *,
            skip_special_tokens: bool = False,
            clean_up_tokenization_spaces: bool | None = None,
        ) -> str:
            return words.decode(ids, skip_special_tokens=skip_special_tokens)

        def get_vocab(self) -> dict[str, int]:
            return words.get_vocab()

        def __len__(self) -> int:
            return words.get_vocab_size()

    plain = NoBackend()
    ref = reference_for(plain)
    assert not ref.codec.exact
    assert check_ids(core_detokenizer(ref.codec), ref, [0, 1, 2, 0]) is None
    with pytest.raises(ValueError, match="G3 needs an exact codec"):
        check_ids(core_detokenizer(ref.codec), ref, [0], guarantees={G3})
    with pytest.raises(UnsupportedTokenizerError):
        Vocabulary.of(plain)


def test_reference_for_checks_its_options() -> None:
    with pytest.raises(ValueError, match="skip_special_tokens"):
        reference_for(tokenizer("qwen3"), skip_special_tokens=True, codec=codec("qwen3"))
    raw = tokenizer("qwen3").backend_tokenizer
    with pytest.raises(OptionTypeError, match="clean_up_tokenization_spaces"):
        reference_for(raw, clean_up_tokenization_spaces="yes", codec=codec("qwen3", raw=True))  # type: ignore[arg-type]
    assert reference_for(raw, codec=codec("qwen3", raw=True)).decode([100024, 119]) == "鱻"


@pytest.mark.parametrize("label", CLEANUP_OBJECTS)
def test_the_reference_decodes_as_codec_for_models_the_tokenizer_with_cleanup(label: str) -> None:
    """The kit's oracle is the one replay and the audit use: on an object whose decode has no
    cleanup option (a raw ``tokenizers.Tokenizer``, mistral-common's, tiktoken's), cleanup is
    ``transformers``' applied to its text, as the codec streams it (it was refused, or a TypeError)."""
    tok, ids = cleanup_object(label)
    ref = reference_for(tok, skip_special_tokens=True, clean_up_tokenization_spaces=True)
    assert ref.codec.exact and ref.decode(list(ids)) == CLEANED[1]
    assert reference_for(tok, skip_special_tokens=True).decode(list(ids)) == CLEANED[0]
    assert check_ids(core_detokenizer(ref.codec), ref, ids) is None


def test_default_guarantees_are_g1_g2_g4() -> None:
    assert STREAMING_GUARANTEES == {G1, G2, G4}
    assert CONTINUATION_GUARANTEES == {C, G2, G4}
    assert [str(g) for g in Guarantee] == [
        "G1 exact",
        "G2 prefix safe",
        "G3 eager",
        "G4 no transient replacement",
        "C continuation",
    ]


# Continuation after a prompt (contract C).


def old_priming(name: str) -> ContinuingFactory:
    """The core as it primed before contract C was redefined: feed the prompt, discard its deltas,
    and stream on from that state (whatever the prompt's state held is sent again)."""
    c = reference(name).codec
    return lambda prompt: CoreStream(feed(start(c), prompt)[0])


@pytest.mark.parametrize(
    ("name", "skip"), [("qwen3", False), ("llama2", False), ("llama2", True), ("t5_small", False)]
)
def test_the_core_continues_prompts(name: str, skip: bool) -> None:
    ref = reference(name, skip)
    vocab = vocabulary(name)
    prompts, ids = strategies.prompt_ids(vocab), strategies.token_ids(vocab)
    assert_continues(core_detokenizer(ref.codec), ref, prompts, ids, guarantees={C, G2, G3, G4})


@pytest.mark.parametrize("name", ["llama2", "mistral_v03", "phi3_mini", "qwen3"])
def test_the_old_priming_is_reported_as_breaking_c(name: str) -> None:
    ref = reference(name)
    vocab = vocabulary(name)
    found = find_continuation_violation(
        old_priming(name), ref, strategies.prompt_ids(vocab), strategies.token_ids(vocab)
    )
    assert found is not None and found.guarantee is C
    assert "the prompt already showed" in found.detail
    # It reproduces, it is minimal, and what it sent again is the tail of the prompt's own text.
    assert summary(check_continuation(old_priming(name), ref, found.prompt, found.ids)) == summary(found)
    for index in range(len(found.prompt)):
        shorter = found.prompt[:index] + found.prompt[index + 1 :]
        again = check_continuation(old_priming(name), ref, shorter, found.ids)
        assert again is None or again.guarantee is not C
    shown = ref.decode(list(found.prompt))
    assert found.expected == continuation(name, found.prompt, found.ids)
    assert any(shown.endswith(found.emitted[:n]) for n in range(1, len(found.emitted) + 1))
    assert check_continuation(core_detokenizer(ref.codec), ref, found.prompt, found.ids) is None
    # The minimal case: a prompt of one held token, and no output at all.
    lone = {"qwen3": ["Â"]}.get(name, ["<0x0A>"])  # Qwen3 126 is the byte 0xC2, a lead byte
    assert tokenizer(name).convert_ids_to_tokens(list(found.prompt)) == lone and found.ids == ()


def test_the_old_priming_sends_the_newline_of_a_prompt_again() -> None:
    # Llama-2's "...:\n" ends in the byte token <0x0A>, held until the run ends.
    ref, encode = reference("llama2"), tokenizer("llama2").encode
    prompt, output = encode("A story about vLLM:\n"), encode(" VLLM is great.", add_special_tokens=False)
    found = check_continuation(old_priming("llama2"), ref, prompt, output)
    expected = continuation("llama2", prompt, output)
    assert found is not None and found.guarantee is C and found.position == 1 and not found.at_finish
    assert found.emitted.startswith("\n") and expected.startswith(found.emitted[1:])
    assert found.prompt == tuple(prompt) and "prompt:   [" in str(found)
    assert check_continuation(core_detokenizer(ref.codec), ref, prompt, output) is None


def test_a_step_function_sees_the_prompt_as_its_history() -> None:
    ref = reference("qwen3")
    seen: list[tuple[int, ...]] = []

    def step_fn(ids_so_far: Sequence[int], new_id: int) -> str:
        seen.append(tuple(ids_so_far))
        return continuation("qwen3", [9707], [*ids_so_far[1:], new_id])[
            len(continuation("qwen3", [9707], ids_so_far[1:])) :
        ]

    assert check_continuation(from_step_function(step_fn), ref, [9707], [11, 1879]) is None
    assert seen == [(9707,), (9707, 11)]


def test_assert_continues_raises_with_the_prompt_in_the_message() -> None:
    vocab = vocabulary("llama2")
    with pytest.raises(ConformanceError) as raised:
        assert_continues(
            old_priming("llama2"),
            reference("llama2"),
            strategies.prompt_ids(vocab),
            strategies.token_ids(vocab),
        )
    assert raised.value.violation.guarantee is C and str(raised.value).startswith("C continuation broken")


# The strategies.


@given(data=st.data())
@settings(max_examples=settings().max_examples // 3)
def test_split_characters_spell_the_text_with_cut_characters(data: st.DataObject) -> None:
    text = "┌──┐ 日本語のテキストです"
    ids = data.draw(split("qwen3", text))
    decoded = reference("qwen3").decode(ids)
    assert text.startswith(decoded.rstrip(R))


def test_split_characters_cut_inside_characters() -> None:
    vocab = vocabulary("qwen3")
    text = "日本語のテキストです"
    decode = reference("qwen3").decode

    def spells_a_cut_character(ids: list[int]) -> bool:
        return decode(ids) == text and any(R in decode([token_id]) for token_id in ids)

    cut = find(split("qwen3", text), spells_a_cut_character)
    assert cut != vocab.encode(text)
    assert vocab.spell("鱻".encode()) == [vocab.pieces[bytes([b])] for b in "鱻".encode()]
    assert vocab.spell("日".encode()) == vocab.encode("日")


@pytest.mark.parametrize("name", ["qwen3", "llama2", "t5_small"])
@given(data=st.data())
@settings(max_examples=settings().max_examples // 3)
def test_strategies_draw_valid_ids(name: str, data: st.DataObject) -> None:
    vocab = vocabulary(name)
    for strategy in (
        strategies.whole_vocabulary(vocab),
        strategies.text_ids(vocab),
        strategies.special_ids(vocab),
        split(name, *strategies.ADVERSARIAL_TEXTS),
    ):
        ids = data.draw(strategy)
        assert all(0 <= i < vocab.size for i in ids)
    if vocab.pieces:
        run = data.draw(strategies.byte_runs(vocab))
        singles = {vocab.pieces[bytes([b])] for b in range(256)}
        assert set(run) <= singles


def test_vocabularies_without_byte_tokens_have_no_byte_runs() -> None:
    vocab = vocabulary("t5_small")
    assert not vocab.pieces
    assert strategies.byte_runs(vocab).is_empty
    with pytest.raises(ValueError, match="no byte tokens"):
        vocab.spell(b"a")
    assert set(vocabulary("qwen3").added_ids) <= set(vocabulary("qwen3").edge_ids)


def test_byte_tokens_are_the_ones_the_core_reads_as_bytes() -> None:
    # "<0xZZ>" is 6 characters but no byte (it was a ValueError); "<0x 1>", before "<0x01>" in
    # the vocabulary, is text to the decoder (it was drawn as byte 1); "<0x+A>" is byte 10, as in
    # the tokenizers crate.
    vocab = {"<unk>": 0, "<0x 1>": 1, "<0xZZ>": 2, "<0x+A>": 3}
    vocab.update({f"<0x{b:02X}>": 4 + b for b in range(256)})
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = tokenizers.decoders.ByteFallback()
    pieces = Vocabulary.of(backend).pieces
    assert all(pieces[bytes([b])] == 4 + b for b in range(256) if b != 10)
    assert pieces[b"\n"] == 3
    assert pieces[b"<0xZZ>"] == 2 and pieces[b"<0x 1>"] == 1
    assert backend.decode([pieces[b"\x01"], pieces[b"\n"]]) == "\x01\n"
    assert Vocabulary.of(synthetic.sentencepiece()).pieces[b"<0xZZ>"] > 256


class OffsetThatDoesNotAdvance:
    """sglang issue 31598 in miniature: while the text ends in U+FFFD, send the complete part but
    leave the sent offset where it was, so the next step sends that part again."""

    def __init__(self) -> None:
        self.decode = reference("qwen3").decode
        self.ids: list[int] = []
        self.sent = 0

    def step(self, token_id: int) -> str:
        self.ids.append(token_id)
        text = self.decode(self.ids)
        complete = len(text.rstrip(R))
        if complete < len(text):
            return text[self.sent : complete]  # the bug: self.sent is not moved
        delta, self.sent = text[self.sent :], len(text)
        return delta

    def finish(self) -> str:
        return self.decode(self.ids)[self.sent :]


def test_duplicated_text_is_named() -> None:
    # Qwen3 id 61804 is " " and the first bytes of an emoji: the space is sent twice.
    found = find_violation(OffsetThatDoesNotAdvance, reference("qwen3"), split("qwen3", "👍 👍"))
    assert summary(found) == (G2, (61804, 235), 2, False, "  👍", " 👍")
    assert found is not None and found.detail == "duplicated ' ' at character 1"
