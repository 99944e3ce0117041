"""Adversarial exactness on tokenizers the other tests do not carry: configurations real models
use (or could use) built here with the ``tokenizers`` and ``sentencepiece`` libraries, each one
beyond tests/synthetic.py and tests/families.py: added tokens with every flag next to byte tokens,
ByteLevel's encoding-only options, decoders in unusual orders, Replace rules whose output makes
new matches, Metaspace without split, WordPiece with another prefix and an empty token, a BPE with
both a prefix and a suffix, a vocabulary with holes, a normalizer that rewrites an added token,
``PreTrainedTokenizerFast`` wrappers with cleanup on, and slow SentencePiece classes.

Each codec must be what it claims: exact (streamed text equals ``decode`` for random ids from the
whole vocabulary, both ``skip_special_tokens`` values, prefix-safe, contract C after prompts that
end in a newline, a space, a byte run or a special token) or an honest fallback (``exact`` False,
a reason that says why) that keeps the same properties.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from typing import Any, cast

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers
from tokenizers.decoders import Decoder

import families
import puredetok
import synthetic
from puredetok import InvalidTokenError, UnsupportedTokenizerError, feed, finish, start, step
from puredetok._build.build import MAX_VOCAB
from puredetok._core import continuation_text
from puredetok._core.decoders.byte_level import byte_alphabet

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

SP = "\u2581"
FEW = settings(max_examples=max(8, settings().max_examples // 8))


def _byte_vocab(step_: int = 1) -> dict[str, int]:
    alphabet = byte_alphabet()
    return {alphabet[b]: b * step_ for b in range(256)}


def _byte_level(decoder: Decoder, step_: int = 1) -> Tokenizer:
    vocab = _byte_vocab(step_)
    if step_ == 1:
        for token in ("Ġhello", "ĠĠ", "ãģ", "ðŁ", "Ġ.", "'s", "ĠĊ", "ĊĊ"):
            vocab.setdefault(token, len(vocab))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.decoder = decoder
    return tokenizer


def added_flags() -> Tokenizer:
    """ByteLevel with added tokens carrying every flag: specials that strip around them, a
    normalized one, a single-word one, and non-special ones that spell part of a character
    (``ðŁĺ``), a newline, a literal U+FFFD, a byte-alphabet letter."""
    tokenizer = _byte_level(decoders.ByteLevel())
    tokenizer.add_special_tokens(
        [
            AddedToken("<|im_end|>", special=True, lstrip=True, rstrip=True),
            AddedToken("<mask>", special=True, lstrip=True, normalized=True),
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(" word ", single_word=True, normalized=True),
            AddedToken("Ġraw", normalized=False),
            AddedToken("ðŁĺ", normalized=False),
            AddedToken("\n", normalized=False),
            AddedToken("\ufffd", normalized=False),
            AddedToken("\u00e9", normalized=True),
        ]
    )
    return tokenizer


def lowercased_special() -> Tokenizer:
    """A Lowercase normalizer and a special token added with ``normalized=True``: ``decode`` spells
    it lower-cased and does not skip it; not what the exact model says, so the fallback (with
    tokenizers 0.23 and later; 0.22 keeps the token as spelled, and the model is exact)."""
    tokenizer = _byte_level(decoders.ByteLevel())
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.add_special_tokens([AddedToken("<S>", special=True, lstrip=True, rstrip=True, normalized=True)])
    tokenizer.add_tokens(
        [AddedToken("Hello", normalized=True), AddedToken(" spaced ", lstrip=True, rstrip=True)]
    )
    return tokenizer


def byte_level_options() -> Tokenizer:
    """ByteLevel with its encoding-only fields set the other way in the JSON (GPT-2 writes
    ``add_prefix_space`` false; the Python constructor ignores these arguments)."""
    state = json.loads(_byte_level(decoders.ByteLevel()).to_str())
    state["decoder"].update(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tokenizer = Tokenizer.from_str(json.dumps(state))
    assert json.loads(tokenizer.to_str())["decoder"]["use_regex"] is False
    return tokenizer


def byte_level_word_level() -> Tokenizer:
    """ByteLevel over a WordLevel model (transformers' cleanup runs on it: it is not BPE), with
    punctuation the cleanup rewrites and added tokens that are runs of whitespace (as code models
    have)."""
    vocab = _byte_vocab()
    for token in ("Ġ.", "Ġ'", "'s", "n't", "Ġdo", "Ġ?", "Ġ,", "ĠĊ"):
        vocab[token] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="Ġ"))
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_tokens([AddedToken(t, normalized=False) for t in ("  ", "\t\t", "    ", " .")])
    tokenizer.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    return tokenizer


def gemma_like() -> Tokenizer:
    """A Unigram model with byte fallback and Gemma's chain (no Strip), for transformers' cleanup."""
    words = ["<unk>", *(f"<0x{b:02X}>" for b in range(256)), SP, f"{SP}a", "a", ".", "'", "s", "n't"]
    words += [f"{SP}'", f"{SP}.", "?", f"{SP}do", "!", ","]
    tokenizer = Tokenizer(models.Unigram([(w, -1.0) for w in words], 0, byte_fallback=True))
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace(SP, " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    tokenizer.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    tokenizer.add_tokens([AddedToken(" .", normalized=False), AddedToken("<0x2E>", normalized=False)])
    return tokenizer


class Shouting:
    """A custom decoder written in Python (``Decoder.custom``): upper-cases every token."""

    def decode_chain(self, tokens: list[str]) -> list[str]:
        """Each token upper-cased."""
        return [token.upper() for token in tokens]


def custom_decoder() -> Tokenizer:
    """A custom Python decoder: ``tokenizers`` cannot serialize it, so it cannot be read (it once
    made ``codec_for`` raise the crate's pickling error instead of falling back)."""
    tokenizer = synthetic.sentencepiece()
    tokenizer.decoder = decoders.Decoder.custom(Shouting())
    return tokenizer


def custom_pre_tokenizer() -> Tokenizer:
    """A custom Python pre-tokenizer and normalizer: encoding only, the decoder is still read."""
    from tokenizers import pre_tokenizers

    class Nothing:
        def pre_tokenize(self, pretok: Any) -> None:
            """Leaves the text as it is."""

        def normalize(self, normalized: Any) -> None:
            """Leaves the text as it is."""

    tokenizer = synthetic.sentencepiece()
    tokenizer.pre_tokenizer = pre_tokenizers.PreTokenizer.custom(Nothing())
    tokenizer.normalizer = normalizers.Normalizer.custom(Nothing())
    return tokenizer


def shared_ids() -> Tokenizer:
    """A vocabulary (as a tokenizer.json may have it) where two tokens share an id: the decode spells
    the id as the crate's ``id_to_token`` does (the model once took the other token and fell back)."""
    state = json.loads(Tokenizer(models.BPE(vocab={"a": 0}, merges=[])).to_str())
    state["model"]["vocab"] = {"a": 0, "b": 1, "c": 1, " d": 3, "e": 4, "e ": 4}
    tokenizer = Tokenizer.from_str(json.dumps(state))
    tokenizer.decoder = decoders.Fuse()
    return synthetic._with_added(tokenizer)


def parakeet() -> Any:
    """``ParakeetTokenizer`` (NVIDIA's CTC speech models): groups repeated ids and drops the pad (its
    blank) in Python, then decodes with its backend (here Metaspace over the tiny vocabulary)."""
    from transformers.models.parakeet.tokenization_parakeet import ParakeetTokenizer

    backend = small(decoders.Metaspace(SP, "always", True))
    backend.add_special_tokens([AddedToken("<pad>", special=True)])
    return ParakeetTokenizer(tokenizer_object=backend, pad_token="<pad>")


def holes() -> Tokenizer:
    """ByteLevel over a vocabulary with holes (byte b at id 3b): the decode drops the missing ids."""
    tokenizer = _byte_level(decoders.ByteLevel(), step_=3)
    tokenizer.add_special_tokens([AddedToken("<|eot|>", special=True)])
    return tokenizer


def empty_token() -> Tokenizer:
    """ByteLevel with a token that is the empty string (in the model and added)."""
    vocab = _byte_vocab()
    vocab[""] = 256
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_tokens([AddedToken("", normalized=False), AddedToken("<|x|>", normalized=False)])
    return tokenizer


SMALL_WORDS = (
    "a",
    "b",
    "aa",
    "ab",
    "ba",
    "\n",
    "\n\n",
    " ",
    SP,
    f"{SP}a",
    "<0x61>",
    "<0xC3>",
    "<0xA9>",
    "<0x0A>",
    "",
)


def small(decoder: Decoder) -> Tokenizer:
    """A tiny vocabulary (letters, spaces, newlines, byte tokens, an empty token) whose every
    short sequence the drawn ids cover densely, with specials and added tokens."""
    vocab = {w: i for i, w in enumerate(SMALL_WORDS)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.decoder = decoder
    tokenizer.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    tokenizer.add_tokens([AddedToken("aa", normalized=False), AddedToken(" a", normalized=False)])
    return tokenizer


def prefix_and_suffix(decoder: Decoder) -> Tokenizer:
    """A BPE with both a continuing-subword prefix and an end-of-word suffix."""
    words = ["a", "b", "##a", "##b", "a</w>", "##a</w>", "</w>", "##", "", "##</w>"]
    tokenizer = Tokenizer(
        models.BPE(
            vocab={w: i for i, w in enumerate(words)},
            merges=[],
            continuing_subword_prefix="##",
            end_of_word_suffix="</w>",
        )
    )
    tokenizer.decoder = decoder
    return synthetic._with_added(tokenizer)


def wordpiece_tilde(cleanup: bool) -> Tokenizer:
    """WordPiece with the prefix ``~~``, pieces that are only the prefix, an empty piece, spaces."""
    words = [
        "[UNK]",
        "it",
        "'",
        "s",
        "~~s",
        "n",
        "~~'t",
        "do",
        ".",
        ",",
        "?",
        "~~",
        "~~~~",
        "",
        " ",
        "a ",
        "~~ ",
    ]
    tokenizer = Tokenizer(
        models.WordPiece(
            vocab={w: i for i, w in enumerate(words)}, unk_token="[UNK]", continuing_subword_prefix="~~"
        )
    )
    tokenizer.decoder = decoders.WordPiece("~~", cleanup)
    return synthetic._with_added(tokenizer)


def wrapped(build: Callable[[], Tokenizer], cleanup: bool) -> Callable[[], Any]:
    """The tokenizer inside ``PreTrainedTokenizerFast`` with ``clean_up_tokenization_spaces`` set."""

    def make() -> Any:
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(tokenizer_object=build(), clean_up_tokenization_spaces=cleanup)

    return make


def _cleanup_on(tok: Any) -> Any:
    """The tokenizer with cleanup on, also for a BPE model (transformers skips it there unless told)."""
    tok.clean_up_tokenization_spaces = True
    tok.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output = True
    return tok


@functools.cache
def _spm_model() -> str:
    return str(families._train_sentencepiece("edges", 400))


def bert_generation() -> Any:
    """A slow SentencePiece class (``SentencePieceBackend``, no tokenizers backend)."""
    from transformers import BertGenerationTokenizer

    return BertGenerationTokenizer(_spm_model())


def _extracted() -> Any:
    from transformers.tokenization_utils_sentencepiece import SentencePieceExtractor

    return SentencePieceExtractor(_spm_model()).extract()


def t5_from_spm() -> Any:
    """``T5Tokenizer`` (Unigram, Metaspace, 100 sentinels) over the pieces and scores of a
    SentencePiece model trained here, as transformers converts one."""
    from transformers import T5Tokenizer

    _, scores, _ = _extracted()
    return T5Tokenizer(vocab=scores)


def llama_from_spm() -> Any:
    """``LlamaTokenizer`` (BPE with byte fallback, Llama's decoder chain, ``legacy=False``) over the
    vocabulary and merges transformers extracts from a SentencePiece model trained here."""
    from transformers import LlamaTokenizer

    vocab, _, merges = _extracted()
    return LlamaTokenizer(vocab=vocab, merges=merges)


@functools.cache
def _byte_bpe() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A tiny byte-level BPE trained on the corpus, with ``<|endoftext|>`` (GPT-2's unknown token)."""
    from tokenizers import pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([line for line in families.CORPUS for _ in range(3)], trainer)
    state = json.loads(tok.to_str())
    merges = [
        (m.split(" ")[0], m.split(" ")[1]) if isinstance(m, str) else (m[0], m[1])
        for m in state["model"]["merges"]
    ]
    return dict(state["model"]["vocab"]), merges


def whisper(*specials: str) -> Any:
    """A Whisper tokenizer with only some of Whisper's special tokens. Without ``<|startofprev|>``
    (or ``<|startoftranscript|>``) the name converts to the unknown token's id, ``<|endoftext|>``,
    which transformers' prompt rule then uses."""
    from transformers import WhisperTokenizer

    vocab, merges = _byte_bpe()
    tok = WhisperTokenizer(vocab=dict(vocab), merges=list(merges))
    if specials:
        tok.add_special_tokens({"additional_special_tokens": list(specials)})
    return tok


D = decoders
EXACT: dict[str, Callable[[], Any]] = {
    "added_flags": added_flags,
    "added_flags_wrapped_cleanup": wrapped(added_flags, True),
    "byte_level_encoding_options": byte_level_options,
    "byte_level_then_replace": lambda: _byte_level(D.Sequence([D.ByteLevel(), D.Replace(" ", "_")])),
    "replace_then_byte_level": lambda: _byte_level(D.Sequence([D.Replace("Ġ", "x"), D.ByteLevel()])),
    "byte_level_then_strip_newline": lambda: _byte_level(D.Sequence([D.ByteLevel(), D.Strip("\n", 0, 1)])),
    "strip_then_byte_level": lambda: _byte_level(D.Sequence([D.Strip("Ġ", 1, 1), D.ByteLevel()])),
    "holes": holes,
    "shared_ids": shared_ids,
    "custom_pre_tokenizer": custom_pre_tokenizer,
    "byte_level_word_level_cleanup": wrapped(byte_level_word_level, True),
    "gemma_like_unigram_cleanup": wrapped(gemma_like, True),
    "added_flags_forced_cleanup": lambda: _cleanup_on(wrapped(added_flags, True)()),
    "empty_token": empty_token,
    "replace_shrinks": lambda: small(D.Sequence([D.ByteFallback(), D.Fuse(), D.Replace("aa", "a")])),
    "replace_swaps": lambda: small(D.Sequence([D.Fuse(), D.Replace("ab", "ba")])),
    "replace_chain": lambda: small(D.Sequence([D.Fuse(), D.Replace("a", "b"), D.Replace("bb", "a")])),
    "strip_newlines_both_ends": lambda: small(D.Sequence([D.ByteFallback(), D.Fuse(), D.Strip("\n", 2, 2)])),
    "newline_to_space_llama": lambda: small(
        D.Sequence([D.Replace("\n", " "), D.ByteFallback(), D.Fuse(), D.Strip(" ", 1, 0)])
    ),
    "metaspace_first_unsplit": lambda: small(D.Metaspace(SP, "first", False)),
    "metaspace_never_unsplit": lambda: small(D.Metaspace(SP, "never", False)),
    "metaspace_before_byte_fallback": lambda: small(
        D.Sequence([D.Metaspace(SP, "first", False), D.ByteFallback(), D.Fuse()])
    ),
    "fuse_then_metaspace_then_strip": lambda: small(
        D.Sequence([D.ByteFallback(), D.Fuse(), D.Metaspace(SP, "always", True), D.Strip(" ", 0, 1)])
    ),
    "ctc_then_fuse_then_replace": lambda: small(
        D.Sequence([D.CTC("a", "\n", True), D.Fuse(), D.Replace(" ", "")])
    ),
    "bpe_suffix_multichar_after_fuse": lambda: small(D.Sequence([D.Fuse(), D.BPEDecoder("ab")])),
    "wordpiece_empty_prefix": lambda: small(D.WordPiece("", True)),
    "replace_grows_into_its_pattern": lambda: small(D.Sequence([D.Fuse(), D.Replace("a", "aa")])),
    "strip_more_than_the_text": lambda: small(D.Sequence([D.Fuse(), D.Strip("a", 100, 100)])),
    "ctc_pad_is_the_delimiter": lambda: small(D.CTC("a", "a", True)),
    "metaspace_replacement_is_a_space": lambda: small(D.Metaspace(" ", "always", True)),
    "newline_to_metaspace_first": lambda: small(
        D.Sequence([D.Replace("\n", SP), D.Metaspace(SP, "first", True)])
    ),
    "wordpiece_tilde_raw": lambda: wordpiece_tilde(False),
    "wordpiece_tilde_cleanup": lambda: wordpiece_tilde(True),
    "prefix_and_suffix_undone": lambda: prefix_and_suffix(
        D.Sequence([D.WordPiece("##", False), D.BPEDecoder()])
    ),
    "sentencepiece_wrapped_cleanup": wrapped(synthetic.sentencepiece, True),
    "wordpiece_raw_wrapped_cleanup": wrapped(lambda: synthetic.wordpiece(cleanup=False), True),
    "ctc_wrapped_no_cleanup": wrapped(synthetic.ctc, False),
    "no_decoder_wrapped_cleanup": wrapped(synthetic.no_decoder, True),
    "t5_from_sentencepiece": t5_from_spm,
    "llama_from_sentencepiece": llama_from_spm,
    "llama_from_sentencepiece_cleanup": lambda: _cleanup_on(llama_from_spm()),
    "empty_sequence": lambda: synthetic._sentencepiece_with(D.Sequence([D.Sequence([])])),
    "nested_sequences": lambda: synthetic._sentencepiece_with(
        D.Sequence(
            [
                D.Sequence([D.Replace(SP, " "), D.ByteFallback()]),
                D.Sequence([]),
                D.Fuse(),
                D.Sequence([D.Strip(" ", 1, 0)]),
            ]
        )
    ),
    "whisper_without_prompt_tokens": whisper,
    "whisper_without_startofprev": lambda: whisper("<|startoftranscript|>", "<|en|>"),
    "whisper_without_startoftranscript": lambda: whisper("<|startofprev|>", "<|en|>"),
}
"""Configurations puredetok models exactly."""

FALLBACK: dict[str, tuple[Callable[[], Any], str]] = {
    "byte_level_twice": (
        lambda: _byte_level(D.Sequence([D.ByteLevel(), D.ByteLevel()])),
        "ByteLevel after a decoder that joins tokens",
    ),
    "byte_fallback_after_fuse": (
        lambda: small(D.Sequence([D.Fuse(), D.ByteFallback()])),
        "ByteFallback after a decoder that joins tokens",
    ),
    "ctc_after_fuse": (lambda: small(D.Sequence([D.Fuse(), D.CTC()])), "CTC after a decoder with memory"),
    "prefix_not_undone_by_bpe_decoder": (
        lambda: prefix_and_suffix(D.BPEDecoder()),
        "continuing_subword_prefix '##', which its decoder does not undo",
    ),
    "lowercased_special": (lowercased_special, "disagrees with decode on ids [264]"),
    "bert_generation_slow": (bert_generation, "has no tokenizers backend"),
    "custom_python_decoder": (custom_decoder, "a decoder that cannot be read"),
    "parakeet_ctc": (parakeet, "ParakeetTokenizer overrides _decode"),
    # The crate leaves an empty token empty; the model's "".replace("", "x") does not: the check sees it.
    "replace_empty_pattern": (
        lambda: small(D.Sequence([D.Replace("", "x"), D.Fuse()])),
        "disagrees with decode on ids [14]: the model gives 'x', decode gives ''",
    ),
}
"""Configurations puredetok does not model: the fallback, with the reason it must give."""

NAMES = sorted(EXACT) + sorted(FALLBACK)
CASES = [(name, skip) for name in NAMES for skip in (False, True)]
IDS = [f"{name}-{'skip' if skip else 'keep'}" for name, skip in CASES]


@functools.cache
def tokenizer(name: str) -> Any:
    return EXACT[name]() if name in EXACT else FALLBACK[name][0]()


@functools.cache
def codec(name: str, skip: bool) -> puredetok.Codec:
    return puredetok.codec_for(tokenizer(name), skip_special_tokens=skip)


def decode(name: str, ids: list[int], skip: bool) -> str:
    """The tokenizer's own decode; inputs on which the ``tokenizers`` crate panics are not compared."""
    try:
        return str(tokenizer(name).decode(list(ids), skip_special_tokens=skip))
    except BaseException as error:
        if type(error).__name__ != "PanicException":
            raise
    assume(False)
    raise AssertionError("unreachable")


@functools.cache
def alone(name: str) -> tuple[str | None, ...]:
    """Each id's text alone (None where the crate panics)."""
    texts: list[str | None] = []
    for token_id in range(codec(name, False).vocab_size):
        try:
            texts.append(str(tokenizer(name).decode([token_id], skip_special_tokens=False)))
        except BaseException as error:
            if type(error).__name__ != "PanicException":
                raise
            texts.append(None)
    return tuple(texts)


@functools.cache
def endings(name: str) -> tuple[int, ...]:
    """Ids a prompt ends with in the contract-C test: text ending in a newline or a space, a byte
    that is not a character alone (U+FFFD or nothing), and every added or special id."""
    picked = set(codec(name, False).added_ids)
    for token_id, text in enumerate(alone(name)):
        if text is not None and (text.endswith(("\n", " ")) or text in ("", "\ufffd")):
            picked.add(token_id)
    return tuple(sorted(picked))


def id_lists(name: str, max_size: int = 16) -> st.SearchStrategy[list[int]]:
    size = codec(name, False).vocab_size
    return st.lists(st.one_of(st.integers(0, size - 1), st.sampled_from(endings(name))), max_size=max_size)


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
def test_the_codec_is_what_it_claims(name: str, skip: bool) -> None:
    c = codec(name, skip)
    # tokenizers 0.22 keeps a normalized added token as it is spelled, and decode agrees with the
    # model; 0.23 and later lower-case it in the vocabulary itself, and decode then spells it so
    kept = name == "lowercased_special" and tokenizer(name).id_to_token(264) == "<S>"
    if name in EXACT or kept:
        assert c.exact and c.family != "window", c.reason
        assert c.reason.startswith("exact model: ")
    else:
        assert not c.exact and c.family == "window"
        assert FALLBACK[name][1] in c.reason, c.reason


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@FEW
@given(data=st.data())
def test_g1_g2_g4(name: str, skip: bool, data: st.DataObject) -> None:
    """After every id the text sent is a prefix of the decode of the ids so far and of a longer
    sequence (G2, hence G4); with finish it is the decode (G1)."""
    c = codec(name, skip)
    ids, more = data.draw(id_lists(name)), data.draw(id_lists(name, max_size=4))
    full, later = decode(name, ids, skip), decode(name, ids + more, skip)
    state, sent = start(c), ""
    for index, token_id in enumerate(ids):
        state, delta = step(state, token_id)
        sent += delta
        assert full.startswith(sent) and later.startswith(sent), (ids[: index + 1], sent, full, later)
    assert sent + finish(state) == full, (ids, sent, full)


@pytest.mark.parametrize(("name", "skip"), CASES, ids=IDS)
@FEW
@given(data=st.data())
def test_contract_c_after_prompts_ending_in_a_newline_space_byte_or_special(
    name: str, skip: bool, data: st.DataObject
) -> None:
    c = codec(name, skip)
    prompt = data.draw(id_lists(name, max_size=6)) + [data.draw(st.sampled_from(endings(name)))]
    output = data.draw(id_lists(name, max_size=8))
    state, text = feed(start(c, prompt), output)
    expected = continuation_text(decode(name, prompt, skip), decode(name, prompt + output, skip))
    assert text + finish(state) == expected, (prompt, output)


def test_holes_decode_to_nothing_and_ids_past_the_vocabulary_are_ignored_when_asked() -> None:
    """The ids between two bytes of the holed vocabulary are inside it (no error) and decode to
    nothing; ids past it raise by default and, with ``out_of_vocab="ignore"``, are skipped as the
    decode skips them."""
    tok = tokenizer("holes")
    strict, lenient = codec("holes", False), puredetok.codec_for(tok, out_of_vocab="ignore")
    assert strict.vocab_size == lenient.vocab_size == 3 * 255 + 1
    ids = [3 * 0xC3, 1, 3 * 0xA9, 2, 3 * ord("a")]
    assert feed(start(strict), ids)[1] + finish(feed(start(strict), ids)[0]) == tok.decode(ids) == "éa"
    with pytest.raises(InvalidTokenError, match="766"):
        step(start(strict), 766)
    past = [3 * 0xC3, 766, 2**31, 3 * 0xA9, 10**6]
    state, text = feed(start(lenient), past)
    assert text + finish(state) == tok.decode(past, skip_special_tokens=False) == "é"
    state, text = feed(start(lenient, [3 * 0xC3, 2**31]), [3 * 0xA9, 10**6])
    assert text + finish(state) == "é"  # a prompt's ids past the vocabulary are ignored too


@pytest.mark.parametrize("name", ["whisper_without_prompt_tokens", "whisper_without_startofprev"])
def test_whisper_prompt_rule_where_the_prompt_tokens_are_missing(name: str) -> None:
    """Without ``<|startofprev|>``, ``<|endoftext|>`` opens a prompt (its id is what the name
    converts to); where ``<|startoftranscript|>`` is missing too, that same id also ends the prompt
    at once, so nothing is dropped (the model once dropped the whole sequence: a needless fallback)."""
    tok = tokenizer(name)
    c = codec(name, True)
    assert c.exact, c.reason
    eot, a, b = tok.convert_tokens_to_ids(["<|endoftext|>", "a", "b"])
    sot = tok.convert_tokens_to_ids("<|startoftranscript|>")
    for ids in ([eot, a, b], [a, eot, b], [eot, a, sot, b], [eot, eot, a]):
        state, text = feed(start(c), ids)
        assert text + finish(state) == tok.decode(ids, skip_special_tokens=True), ids
    whole = "whisper_without_prompt_tokens"
    assert tok.decode([eot, a, b], skip_special_tokens=True) == ("ab" if name == whole else "")


def test_an_empty_sequence_decoder_is_named() -> None:
    """An empty ``Sequence`` (tokens joined as they are) is a family with a name, not ``""``; nested
    sequences read as the flat chain."""
    assert codec("empty_sequence", False).family == "Sequence([])"
    assert codec("empty_sequence", False).reason == "exact model: Sequence([])"
    assert codec("nested_sequences", False).family == "sentencepiece"


@pytest.mark.parametrize(("name", "skip"), [(n, s) for n in sorted(FALLBACK) for s in (False, True)])
@FEW
@given(data=st.data())
def test_contract_c_after_long_prompts_on_the_fallback(name: str, skip: bool, data: st.DataObject) -> None:
    """A prompt longer than the fallback's window (96 ids) primes it as a short one does."""
    c = codec(name, skip)
    prompt = data.draw(st.lists(st.integers(0, c.vocab_size - 1), min_size=100, max_size=160))
    prompt += data.draw(id_lists(name, max_size=8))
    output = data.draw(id_lists(name, max_size=12))
    state, text = feed(start(c, prompt), output)
    expected = continuation_text(decode(name, prompt, skip), decode(name, prompt + output, skip))
    assert text + finish(state) == expected, (prompt, output)


def test_the_conformance_kit_reads_a_tokenizer_with_a_custom_decoder() -> None:
    """``puredetok.testing``'s vocabulary of a tokenizer whose decoder cannot be serialized."""
    from puredetok.testing.strategies import Vocabulary

    vocabulary = Vocabulary.of(tokenizer("custom_python_decoder"))
    assert vocabulary.size == codec("custom_python_decoder", False).vocab_size and not vocabulary.pieces


@pytest.mark.parametrize("model", [models.BPE(), models.WordLevel(vocab={}, unk_token="<unk>")])
@pytest.mark.parametrize("window", [False, True])
def test_an_empty_vocabulary_is_refused_clearly(model: models.Model, window: bool) -> None:
    """No id to decode: a clear error (it once failed deep in the build-time check's sampler)."""
    empty = Tokenizer(model)
    empty.decoder = decoders.ByteLevel()
    with pytest.raises(UnsupportedTokenizerError, match="empty vocabulary"):
        puredetok.codec_for(empty, window=window)


@pytest.mark.parametrize("largest", [MAX_VOCAB, 2**31 - 1])
def test_an_id_past_the_largest_supported_vocabulary_is_refused_clearly(largest: int) -> None:
    """A codec's tables are as long as the largest id: one id near 2**31 would exhaust memory at
    build; it is a clear error instead, at once."""
    sparse = Tokenizer(models.WordLevel(vocab={"a": 0, "<unk>": 1, "b": largest}, unk_token="<unk>"))
    assert sparse.decode([largest]) == "b"
    with pytest.raises(UnsupportedTokenizerError, match=f"id of {largest:,}"):
        puredetok.codec_for(sparse)


def test_shared_ids_decode_as_the_crate_spells_them() -> None:
    tok = tokenizer("shared_ids")
    assert [tok.id_to_token(i) for i in (1, 4)] == [tok.decode([1]), tok.decode([4])]
    state, text = feed(start(codec("shared_ids", False)), [0, 1, 4, 2, 3])
    assert text + finish(state) == tok.decode([0, 1, 4, 2, 3])


@pytest.mark.parametrize("name", NAMES)
def test_bad_ids_raise_and_leave_the_state_as_it_was(name: str) -> None:
    c = codec(name, False)
    good = list(endings(name)[:5])
    state, before = feed(start(c), good)
    for bad in (-1, c.vocab_size, 2**40, 1.5, "3", None, True):
        with pytest.raises(InvalidTokenError):
            step(state, cast(Any, bad))
    state, after = feed(state, good)
    assert before + after + finish(state) == decode(name, good + good, False)


@pytest.mark.parametrize("spaces", [False, True])
@pytest.mark.parametrize("skip", [False, True])
@FEW
@given(data=st.data())
def test_spaces_between_special_tokens_on_a_slow_sentencepiece_class(
    spaces: bool, skip: bool, data: st.DataObject
) -> None:
    """``spaces_between_special_tokens`` reaches the slow class's decode through the codec (which
    passes it on; transformers 5.24's SentencePiece classes ignore it), and the text agrees."""
    tok = tokenizer("bert_generation_slow")
    c = _spaced("bert_generation_slow", skip, spaces)
    ids = data.draw(id_lists("bert_generation_slow"))
    state, text = feed(start(c), ids)
    assert text + finish(state) == tok.decode(
        ids, skip_special_tokens=skip, spaces_between_special_tokens=spaces
    )


@functools.cache
def _spaced(name: str, skip: bool, spaces: bool) -> puredetok.Codec:
    return puredetok.codec_for(
        tokenizer(name), skip_special_tokens=skip, spaces_between_special_tokens=spaces
    )
