"""Shared test support: the real tokenizers carried in tests/data, and id strategies over them."""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from hypothesis import strategies as st  # noqa: E402

import puredetok  # noqa: E402
from puredetok.adapters.loading import default_tokenizer_path, load_tokenizer  # noqa: E402

DATA = Path(__file__).parent / "data" / "tokenizers"

TOKENIZERS = (
    "qwen3",
    "qwen2_5",
    "llama3",
    "gpt2",
    "phi2",
    "llama2",
    "mistral_v03",
    "phi3_mini",
    "t5_small",
    "distilbert_base_uncased",
)
"""Every real tokenizer the tests carry (all of ../shared/tokenizers)."""

BYTE_LEVEL = ("qwen3", "qwen2_5", "llama3", "gpt2", "phi2")
SENTENCEPIECE = ("llama2", "mistral_v03", "phi3_mini")

MULTILINGUAL = (
    "推理引擎 😀 streams text: naïve café, 1+1=2.\n第二行结束。 日本語のテキストを、ひらがなとカタカナで。"
    " 한국어 텍스트도 스트리밍됩니다. ภาษาไทยก็ได้ครับ Ελληνικά Русский текст 🏳️‍🌈👍🏽 ┌──┐ it's don't ."
)


def _folder(name: str) -> Path:
    """Decompress one tokenizer folder into a content-addressed temporary folder (reused)."""
    if name == "qwen3":
        return default_tokenizer_path()
    source = DATA / name
    files = sorted(source.iterdir())
    digest = hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in files)).hexdigest()[:16]
    target = Path(tempfile.gettempdir()) / "puredetok-test-tokenizers" / f"{name}-{digest}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    if name == "qwen2_5":  # same vocab.json and merges.txt as qwen3 (see tests/data/tokenizers/MANIFEST.md)
        for shared in ("vocab.json", "merges.txt"):
            shutil.copy(default_tokenizer_path() / shared, scratch / shared)
    for file in files:
        if file.suffix == ".gz":
            (scratch / file.stem).write_bytes(gzip.decompress(file.read_bytes()))
        else:
            shutil.copy(file, scratch / file.name)
    try:
        os.replace(scratch, target)
    except OSError:  # another process won the race
        shutil.rmtree(scratch, ignore_errors=True)
    return target


@functools.cache
def tokenizer(name: str) -> Any:
    """The transformers tokenizer, loaded offline once per test session."""
    return load_tokenizer(_folder(name))


@functools.cache
def codec(name: str, skip: bool = False, cleanup: bool | None = None, raw: bool = False) -> puredetok.Codec:
    """The codec for a tokenizer and options, built once per test session."""
    tok = tokenizer(name)
    source = tok.backend_tokenizer if raw else tok
    return puredetok.codec_for(source, skip_special_tokens=skip, clean_up_tokenization_spaces=cleanup)


def reference(
    name: str, ids: Sequence[int], skip: bool = False, cleanup: bool | None = None, raw: bool = False
) -> str:
    """What the tokenizer itself decodes (the oracle of G1)."""
    tok = tokenizer(name)
    if raw:
        text = tok.backend_tokenizer.decode(list(ids), skip_special_tokens=skip)
        if cleanup:
            from puredetok.core.decoders.cleanup import TRANSFORMERS_RULES, apply_rules

            text = apply_rules(TRANSFORMERS_RULES, text)
        return str(text)
    return str(tok.decode(list(ids), skip_special_tokens=skip, clean_up_tokenization_spaces=cleanup))


@functools.cache
def interesting_ids(name: str) -> tuple[int, ...]:
    """Ids that exercise edge cases: specials and added tokens, byte tokens, single bytes (lead and
    continuation), tokens decoding to "" or containing U+FFFD, bare spaces, cleanup punctuation."""
    tok = tokenizer(name)
    backend = tok.backend_tokenizer
    size = max(backend.get_vocab(with_added_tokens=True).values()) + 1
    alone = backend.decode_batch([[i] for i in range(size)], skip_special_tokens=False)
    picked = set(backend.get_added_tokens_decoder())
    for token_id, text in enumerate(alone):
        token = backend.id_to_token(token_id)
        if token is None or text == "" or "\ufffd" in text or text.strip() == "":
            picked.add(token_id)
        elif token.startswith("<0x") and len(token) == 6:
            picked.add(token_id)
    vocab = backend.get_vocab(with_added_tokens=True)
    for piece in (
        ".",
        ",",
        "?",
        "!",
        "'",
        "s",
        "'s",
        "n't",
        "m",
        "ve",
        "re",
        "do",
        "not",
        "A",
        "a",
        "\u2581",
        "\u2581.",
        "\u2581'",
        "\u2581n't",
        "\u2581do",
        "\u2581not",
        "##s",
        "Ġ",
        "Ġ.",
        "Ġ'",
        "'m",
        "'re",
        "Ċ",
        "ĠĠ",
    ):
        if piece in vocab:
            picked.add(vocab[piece])
    for text in (" 's", " n't", " 've", " .", " do not", "  .", "┌", "🦩", "推理", "ひらがな", "한국어"):
        picked.update(tok.encode(text, add_special_tokens=False))
    return tuple(sorted(picked))


@functools.cache
def byte_ids(name: str) -> dict[int, int]:
    """The id of each single-byte token (byte-level alphabet or ``<0xNN>``), where the vocabulary has one."""
    from puredetok.core.decoders.byte_level import byte_alphabet

    vocab = tokenizer(name).backend_tokenizer.get_vocab(with_added_tokens=True)
    found = {}
    for byte, char in byte_alphabet().items():
        if name in ("llama2", "mistral_v03", "phi3_mini"):
            char = f"<0x{byte:02X}>"
        if char in vocab:
            found[byte] = vocab[char]
    return found


@functools.cache
def witnesses(name: str) -> tuple[tuple[int, ...], ...]:
    """Short continuations that can change held text: single interesting ids, and runs of 1-3
    continuation bytes that complete (or spoil) an incomplete character."""
    singles = [(i,) for i in interesting_ids(name)]
    bytes_ = byte_ids(name)
    runs = []
    for a in (0x80, 0x90, 0xA0, 0xBF):
        for n in (1, 2, 3):
            if a in bytes_ and 0x80 in bytes_:
                runs.append((bytes_[a],) + (bytes_[0x80],) * (n - 1))
    return tuple(singles + runs)


def id_lists(name: str, max_size: int = 40) -> st.SearchStrategy[list[int]]:
    """Random ids over the whole vocabulary, biased towards the interesting ones, or ids of text."""
    size = codec(name).vocab_size
    one = st.one_of(st.integers(0, size - 1), st.sampled_from(interesting_ids(name)))
    anywhere = st.lists(one, max_size=max_size)
    tok = tokenizer(name)
    alphabet = st.sampled_from(list(MULTILINGUAL))
    from_text = st.text(alphabet, max_size=max_size).map(
        lambda s: list(tok.encode(s, add_special_tokens=False))
    )
    return st.one_of(anywhere, anywhere, from_text)


def stream(state: puredetok.DecodeState, ids: Sequence[int]) -> tuple[puredetok.DecodeState, list[str]]:
    """Step through ids one by one, collecting the deltas."""
    deltas = []
    for token_id in ids:
        state, delta = puredetok.step(state, token_id)
        deltas.append(delta)
    return state, deltas


def assert_streams_exactly(c: puredetok.Codec, ids: Sequence[int], expected: str) -> None:
    """G1 and G2 for one sequence: every emitted prefix is a prefix of ``expected``, the stream's
    text equals it, and ``feed`` gives the same state and text as stepping."""
    state, emitted = puredetok.start(c), ""
    for token_id in ids:
        state, delta = puredetok.step(state, token_id)
        emitted += delta
        assert expected.startswith(emitted), (list(ids), emitted, expected)
    assert emitted + puredetok.finish(state) == expected, list(ids)
    fed, text = puredetok.feed(puredetok.start(c), ids)
    assert fed == state and text == emitted


@functools.cache
def vocabulary(name: str) -> Any:
    """The conformance kit's view of a tokenizer's ids (read once per test session)."""
    from puredetok.testing.strategies import Vocabulary

    return Vocabulary.of(tokenizer(name))


def prompt_lists(name: str) -> st.SearchStrategy[list[int]]:
    """Prompts as engines send them (text ending in a newline, ``":\\n"`` or a space, with a byte
    run or an incomplete character at the end, with a special token, a chat template's prompt),
    and random ids over the whole vocabulary."""
    from puredetok.testing.strategies import prompt_ids

    return st.one_of(prompt_ids(vocabulary(name), max_size=20), id_lists(name, max_size=20))


def output_lists(name: str) -> st.SearchStrategy[list[int]]:
    """Outputs after a prompt: random ids and text (:func:`id_lists`), and the kit's ids aimed at
    where detokenizers break (split characters, byte runs, specials)."""
    from puredetok.testing.strategies import token_ids

    return st.one_of(id_lists(name, max_size=30), token_ids(vocabulary(name), max_size=30))


def continuation(name: str, prompt: Sequence[int], output: Sequence[int], skip: bool = False) -> str:
    """Contract C's text from the tokenizer's decode alone: ``decode(p + s)`` after the longest
    prefix it shares with ``decode(p)``."""
    shown = reference(name, prompt, skip)
    full = reference(name, [*prompt, *output], skip)
    same = 0
    for x, y in zip(shown, full):
        if x != y:
            break
        same += 1
    return full[same:]
