"""Shared test support: the real tokenizers carried in tests/data, their decode (the oracle), and
id strategies over them built from the public conformance kit's (puredetok.testing.strategies),
which are the only strategies of ids over a real vocabulary."""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import msgspec  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import puredetok  # noqa: E402
from puredetok._core import continuation_text  # noqa: E402
from puredetok.serving._codec_cache import CodecCache  # noqa: E402
from puredetok.serving._loading import default_tokenizer_path, load_tokenizer  # noqa: E402
from puredetok.testing.strategies import (  # noqa: E402
    Vocabulary,
    prompt_ids,
    text_ids,
    token_ids,
    whole_vocabulary,
)

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
def shared_codecs() -> CodecCache:
    """One codec cache for the tests' managers that need no cache of their own: keyed by the
    tokenizer object, so each codec of a tokenizer is built once per test session."""
    return CodecCache(max_codecs=256)


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
            from puredetok._core.decoders.cleanup import TRANSFORMERS_RULES, apply_rules

            text = apply_rules(TRANSFORMERS_RULES, text)
        return str(text)
    return str(tok.decode(list(ids), skip_special_tokens=skip, clean_up_tokenization_spaces=cleanup))


@functools.cache
def vocabulary(name: str) -> Vocabulary:
    """The conformance kit's view of a tokenizer's ids (read once per test session): its
    strategies are the tests' strategies."""
    return Vocabulary.of(tokenizer(name))


def edge_ids(name: str) -> tuple[int, ...]:
    """Ids where detokenizers go wrong (:attr:`Vocabulary.edge_ids`)."""
    return vocabulary(name).edge_ids


@functools.cache
def byte_ids(name: str) -> dict[int, int]:
    """The id of each single-byte token (byte-level alphabet or ``<0xNN>``); empty for a vocabulary
    without byte tokens."""
    pieces = vocabulary(name).pieces
    return {byte: pieces[bytes([byte])] for byte in range(256)} if pieces else {}


@functools.cache
def witnesses(name: str) -> tuple[tuple[int, ...], ...]:
    """Short continuations that can change held text: runs of 1-3 continuation bytes that complete
    (or spoil) an incomplete character, single edge ids, and the ids of the texts that complete a
    space cleanup pattern ("'t" after " n", "'s" after a space...)."""
    bytes_ = byte_ids(name)
    runs = []
    for a in (0x80, 0x90, 0xA0, 0xBF):
        for n in (1, 2, 3):
            if a in bytes_ and 0x80 in bytes_:
                runs.append((bytes_[a],) + (bytes_[0x80],) * (n - 1))
    singles = [(i,) for i in edge_ids(name)]
    vocab = tokenizer(name).get_vocab()
    completions = [
        tuple(vocab[char] for char in text) for text in ("'t", "'s", "'m") if set(text) <= set(vocab)
    ]
    completions += [tuple(vocabulary(name).encode(text)) for text in ("'t", "'s", "'ve", "'re", " not")]
    return tuple(dict.fromkeys([*runs, *singles, *completions]))


def id_lists(name: str, max_size: int = 40) -> st.SearchStrategy[list[int]]:
    """The kit's ids over the whole vocabulary (half of them edge ids), twice as likely as the
    kit's ids of multilingual text."""
    v = vocabulary(name)
    anywhere = whole_vocabulary(v, max_size=max_size)
    return st.one_of(anywhere, anywhere, text_ids(v, max_size=max_size))


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


def prompt_lists(name: str) -> st.SearchStrategy[list[int]]:
    """Prompts as engines send them (text ending in a newline, ``":\\n"`` or a space, with a byte
    run or an incomplete character at the end, with a special token, a chat template's prompt),
    and random ids over the whole vocabulary."""
    return st.one_of(prompt_ids(vocabulary(name), max_size=20), id_lists(name, max_size=20))


def output_lists(name: str) -> st.SearchStrategy[list[int]]:
    """Outputs after a prompt: random ids and text (:func:`id_lists`), and the kit's ids aimed at
    where detokenizers break (split characters, byte runs, specials)."""
    return st.one_of(id_lists(name, max_size=30), token_ids(vocabulary(name), max_size=30))


def continuation(name: str, prompt: Sequence[int], output: Sequence[int], skip: bool = False) -> str:
    """Contract C's text from the tokenizer's decode alone: ``decode(p + s)`` after the longest
    prefix it shares with ``decode(p)``."""
    return continuation_text(reference(name, prompt, skip), reference(name, [*prompt, *output], skip))


T = TypeVar("T", bound="msgspec.Struct")


def forged(record: T, **fields: Any) -> T:
    """``record`` with ``fields`` set past its checks: what no constructor nor decoder makes, for
    tests of the checks a consumer keeps for itself (the manager's of an opening's values).
    """
    record = msgspec.structs.replace(record)
    for name, value in fields.items():
        getattr(type(record), name).__set__(record, value)  # the field's slot: on every msgspec
    return record


CLEANED = ("Hello . It 's don 't ?", "Hello. It's don 't?")
"""A text, and what ``transformers``' space cleanup makes of it."""

CLEANUP_OBJECTS = ("raw gpt2", "MistralCommonBackend", "Tekkenizer", "tiktoken.Encoding")
"""Tokenizer objects whose decode codec_for models with ``clean_up_tokenization_spaces=True``
(those without the option get ``transformers``' cleanup applied to their text)."""


@functools.cache
def cleanup_object(label: str) -> tuple[Any, tuple[int, ...]]:
    """One of :data:`CLEANUP_OBJECTS` and the ids of ``CLEANED[0]`` it encodes."""
    import mistral_objects

    text = CLEANED[0]
    if label == "raw gpt2":
        raw = tokenizer("gpt2").backend_tokenizer
        return raw, tuple(raw.encode(text).ids)
    if label == "MistralCommonBackend":
        backend = mistral_objects.backend("tekken_240911")
        return backend, tuple(backend.encode(text, add_special_tokens=False))
    if label == "Tekkenizer":
        inner = mistral_objects.inner("tekken_240911")
        return inner, tuple(inner.encode(text, bos=False, eos=False))
    encoding = mistral_objects.tekken_encoding("tekken_240911")
    return encoding, tuple(encoding.encode(text))
