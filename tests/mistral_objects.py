"""Mistral's tokenizers as engines hold them, built from the files mistral-common installs with
itself (``mistral_common/data/``, read from the installed package, never copied): mistral-common's
``Tekkenizer`` / ``SentencePieceTokenizer`` and its ``MistralTokenizer``, ``transformers``'
``MistralCommonBackend``, a wrapper shaped as vLLM's ``MistralTokenizer`` (its attributes and its
decode), and ``tiktoken.Encoding`` objects built from the Tekken files' ranks (as mistral-common
builds them; tiktoken's own encodings download their files, so none is used).

Each object comes with its own decode (the oracle) and a :class:`Vocabulary` for the conformance
kit's id strategies.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mistral_common
import tiktoken
from hypothesis import strategies as st
from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer
from mistral_common.tokens.tokenizers.tekken import Tekkenizer
from transformers.tokenization_mistral_common import MistralCommonBackend

import puredetok
from puredetok.testing.strategies import Vocabulary, byte_runs, text_ids, whole_vocabulary

DATA = Path(mistral_common.__file__).parent / "data"

FILES = {
    "tekken_240718": "tekken_240718.json",
    "tekken_240911": "tekken_240911.json",
    "spm_v1": "tokenizer.model.v1",
    "spm_v3": "mistral_instruct_tokenizer_240323.model.v3",
    "spm_v7": "mistral_instruct_tokenizer_241114.model.v7",
}
"""The five tokenizer files of mistral-common 1.13."""

TEXTS = (
    "推理引擎 😀 streams text: naïve café, 1+1=2.\n第二行结束。 日本語のテキスト、한국어 텍스트 ภาษาไทย",
    "Ελληνικά Русский 🏳️‍🌈👍🏽 ┌──┐ it's don't . 🦩🦩 鱻 é€ \t tabs  and   spaces\n\n",
    "lang:fr Bonjour, lang:en hello [INST] <s> </s> <unk> [TOOL_CALLS] <0x0A>",
)
"""Real text: what a model generates (split characters, emoji sequences, control tokens' spellings,
Voxtral's language tag)."""


class VllmLikeWrapper:
    """An object with the attributes and decode of vLLM's ``MistralTokenizer`` (vllm/tokenizers/
    mistral.py): ``transformers_tokenizer``, ``mistral``, ``instruct``, ``tokenizer``, and a decode
    that calls the ``MistralCommonBackend``'s with ``skip_special_tokens``."""

    def __init__(self, backend: MistralCommonBackend) -> None:
        self.transformers_tokenizer = backend
        self.mistral = backend.tokenizer
        self.instruct = self.mistral.instruct_tokenizer
        self.tokenizer = self.instruct.tokenizer

    def decode(self, ids: list[int] | int, skip_special_tokens: bool = False) -> str:
        return str(self.transformers_tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))


def path(name: str) -> Path:
    return DATA / FILES[name]


@functools.cache
def inner(name: str) -> Any:
    """mistral-common's own tokenizer object for a file."""
    if name.startswith("tekken"):
        return Tekkenizer.from_file(path(name))
    return SentencePieceTokenizer(path(name))


@functools.cache
def backend(name: str) -> MistralCommonBackend:
    return MistralCommonBackend(tokenizer_path=path(name))


@functools.cache
def tekken_encoding(name: str) -> tiktoken.Encoding:
    """A ``tiktoken.Encoding`` from a Tekken file's ranks (as mistral-common builds its own), with
    two special tokens after them."""
    data = json.loads(path(name).read_text(encoding="utf-8"))
    count = data["config"]["default_vocab_size"] - data["config"]["default_num_special_tokens"]
    ranks = {base64.b64decode(entry["token_bytes"]): entry["rank"] for entry in data["vocab"][:count]}
    return tiktoken.Encoding(
        name=f"{name}-ranks",
        pat_str=data["config"]["pattern"],
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": count, "<|fim_middle|>": count + 1},
    )


@functools.cache
def obj(kind: str, name: str) -> Any:
    """One object engines hold: ``inner``, ``mistral`` (mistral-common's MistralTokenizer),
    ``backend`` (MistralCommonBackend), ``vllm`` (a wrapper shaped as vLLM's), ``tiktoken``."""
    if kind == "inner":
        return inner(name)
    if kind == "mistral":
        return MistralTokenizer.from_file(str(path(name)))
    if kind == "backend":
        return backend(name)
    if kind == "vllm":
        return VllmLikeWrapper(backend(name))
    if kind == "tiktoken":
        return tekken_encoding(name)
    raise KeyError(kind)


def decoder(kind: str, name: str, skip: bool) -> Callable[[list[int]], str]:
    """The object's own decode with ``skip_special_tokens`` (``IGNORE``) or not (``KEEP``)."""
    target = obj(kind, name)
    if kind in ("inner", "mistral"):
        policy = SpecialTokenPolicy.IGNORE if skip else SpecialTokenPolicy.KEEP
        return lambda ids: str(target.decode(list(ids), special_token_policy=policy))
    if kind == "tiktoken":
        special = {target.encode_single_token(t) for t in target.special_tokens_set}
        return lambda ids: str(target.decode([i for i in ids if not (skip and i in special)]))
    return lambda ids: str(target.decode(list(ids), skip_special_tokens=skip))


@functools.cache
def vocabulary(name: str, tiktoken_ids: bool = False) -> Vocabulary:
    """The conformance kit's view of a file's ids: edge ids are the control ids, the byte tokens,
    ids whose text alone is empty, a U+FFFD or whitespace, and the ids of the real texts."""
    tok = inner(name)
    if tiktoken_ids:
        enc = tekken_encoding(name)
        size, controls = enc.n_vocab, sorted(enc.encode_single_token(t) for t in enc.special_tokens_set)

        def encode(text: str) -> list[int]:
            return list(enc.encode(text, disallowed_special=()))

        byte_ids = {bytes([b]): b for b in range(256)}
    else:
        size = tok.n_words
        controls = sorted(range(tok.num_special_tokens) if name.startswith("tekken") else tok.special_ids)

        def encode(text: str) -> list[int]:
            return list(tok.encode(text, bos=False, eos=False))

        if name.startswith("tekken"):
            byte_ids = {bytes([b]): b + tok.num_special_tokens for b in range(256)}
        else:
            byte_ids = {bytes([b]): tok._model.piece_to_id(f"<0x{b:02X}>") for b in range(256)}
    edges = set(controls) | set(byte_ids.values())
    for text in TEXTS:
        edges.update(encode(text))
    alone = [tok.decode([i], SpecialTokenPolicy.IGNORE) for i in range(tok.n_words)]
    edges.update(i for i, text in enumerate(alone) if text.strip() == "" or "\ufffd" in text)
    edges = {i for i in edges if i < size}
    return Vocabulary(
        size=size,
        added_ids=tuple(controls),
        edge_ids=tuple(sorted(edges)),
        pieces=byte_ids,
        encode=encode,
        encode_prompt=encode,
    )


@functools.cache
def codec(kind: str, name: str, skip: bool) -> puredetok.Codec:
    """The codec of an object (built once)."""
    return puredetok.codec_for(obj(kind, name), skip_special_tokens=skip)


def vocabulary_of(kind: str, name: str) -> Vocabulary:
    """The vocabulary of an object (a tiktoken encoding has its own special ids)."""
    return vocabulary(name, tiktoken_ids=kind == "tiktoken")


def ids_of(kind: str, name: str, max_size: int = 30) -> st.SearchStrategy[list[int]]:
    """The whole vocabulary (half edge ids), real texts' ids, random texts' ids, byte runs, mixed."""
    v = vocabulary(name, tiktoken_ids=kind == "tiktoken")
    real = (
        st.sampled_from(TEXTS)
        .map(v.encode)
        .flatmap(
            lambda ids: st.tuples(st.integers(0, len(ids)), st.integers(0, len(ids))).map(
                lambda cut: ids[min(cut) : max(cut)][:max_size]
            )
        )
    )
    parts = st.one_of(
        whole_vocabulary(v, max_size=max_size), real, text_ids(v, max_size=12), byte_runs(v, max_size=6)
    )
    return st.lists(parts, max_size=4).map(lambda chunks: [i for chunk in chunks for i in chunk][:60])


def chat_prompt(name: str) -> list[int]:
    """A real instruct prompt: mistral-common's own encoding of a chat (system, user, assistant,
    user), control tokens included."""
    from mistral_common.protocol.instruct.messages import AssistantMessage, SystemMessage, UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    messages: list[Any] = [
        SystemMessage(content="Be brief."),
        UserMessage(content="Quel temps fait-il? 😀"),
        AssistantMessage(content="Il fait beau ☀️."),
        UserMessage(content="Et demain? 🦩"),
    ]
    request: Any = ChatCompletionRequest(messages=messages)
    return [int(i) for i in obj("mistral", name).encode_chat_completion(request).tokens]
