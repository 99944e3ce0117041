"""Hypothesis strategies of token-id sequences for one tokenizer, aimed at where detokenizers break.

Each strategy takes a tokenizer (anything :func:`puredetok.codec_for` takes, with a ``tokenizers``
backend) or, cheaper when you build several, its :class:`Vocabulary` (``Vocabulary.of(tokenizer)``
reads the whole vocabulary once, which takes up to a second).
"""

from __future__ import annotations

__all__ = [
    "ADVERSARIAL_TEXTS",
    "MULTILINGUAL",
    "Vocabulary",
    "whole_vocabulary",
    "text_ids",
    "byte_runs",
    "special_ids",
    "split_characters",
    "token_ids",
    "PROMPT_ENDINGS",
    "prompt_ids",
]

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs
import tokenizers
from hypothesis import strategies as st

from puredetok._build import TokenizerLike, backend_of
from puredetok._core import byte_alphabet, byte_token_value
from puredetok.errors import UnsupportedTokenizerError

ADVERSARIAL_TEXTS: tuple[str, ...] = (
    "鱻",
    "🦩",
    "日本語のテキストです",
    "┌──┐\n│ok│\n└──┘",
    "🏳️‍🌈 👍🏽 ❤️ 👨‍👩‍👧",
    "nai\u0308ve cafe\u0301 naïve",
    "한국어 텍스트",
    "ภาษาไทยก็ได้ครับ",
    "a \ufffd b",
    "Hello world. It's  .  don't \n\n x",
    "推理引擎 😀 streams text: 1+1=2.\n第二行结束。",
)
"""Texts whose characters detokenizers are known to break, simplest first: a rare ideograph and an
emoji split over several tokens, kanji followed by kana, box-drawing corners, emoji with ZWJ,
U+FE0F and skin-tone modifiers, combining accents, Hangul, Thai, a literal U+FFFD, runs of spaces
and punctuation that space cleanup rewrites, mixed scripts."""

MULTILINGUAL = (
    "推理引擎 😀 streams text: naïve café, 1+1=2.\n第二行结束。 日本語のテキストを、ひらがなとカタカナで。"
    " 한국어 텍스트도 스트리밍됩니다. ภาษาไทยก็ได้ครับ Ελληνικά Русский текст 🏳️‍🌈👍🏽 ┌──┐ it's don't ."
)
"""The default alphabet of :func:`text_ids`."""

PROMPT_ENDINGS: tuple[str, ...] = ("\n", ":\n", " ", "\n\n", ": ", "")
"""How the text of a prompt ends, as engines send prompts: a newline (a chat template's turn, a
``"...:\n"`` instruction), a space, or nothing."""

_EDGE_TEXTS = (
    *(".", ",", "?", "!", "'", "'s", "n't", " .", " ,", " '", " 's", " n't", " 've", " do not", "  .", "  "),
    *("\n", " ", "┌", "🦩", "推理", "ひらがな", "한국어"),
)
"""Texts whose ids are edge ids: punctuation and words that space cleanup rewrites, and characters
that byte-level vocabularies split over several tokens."""

_EDGE_TOKENS = frozenset(
    {*(".", ",", "?", "!", "'", "s", "'s", "n't", "m", "'m", "ve", "re", "'re", "do", "not", "A", "a"), "##s"}
    | {"\u2581", "\u2581.", "\u2581'", "\u2581n't", "\u2581do", "\u2581not", "Ġ", "Ġ.", "Ġ'", "ĠĠ", "Ċ"}
)
"""Tokens that are edge ids where a vocabulary has them: the same pieces as their own tokens, with
a word-start marker or not."""


def _backend(tokenizer: TokenizerLike) -> tokenizers.Tokenizer:
    backend = backend_of(tokenizer)
    if backend is None:
        raise UnsupportedTokenizerError(
            f"the strategies need a tokenizers backend; a {type(tokenizer).__name__} has none"
        )
    return backend


def _decoder_types(config: Any) -> Iterator[str]:
    if isinstance(config, dict):
        yield str(config.get("type"))
        for inner in config.get("decoders") or ():
            yield from _decoder_types(inner)


def _pieces(backend: tokenizers.Tokenizer, added: set[int]) -> dict[bytes, int]:
    """Token ids by the bytes they stand for, for byte-level and byte-fallback vocabularies."""
    try:
        config = json.loads(backend.decoder.__getstate__()) if backend.decoder else None
    except Exception:  # a custom (Python) decoder cannot be serialized: no byte pieces are known
        config = None
    types = set(_decoder_types(config))
    vocab = backend.get_vocab(with_added_tokens=False)
    pieces: dict[bytes, int] = {}
    if "ByteLevel" in types:
        to_byte = {char: byte for byte, char in byte_alphabet().items()}
        for token, token_id in vocab.items():
            if token_id not in added and all(char in to_byte for char in token):
                value = bytes(to_byte[char] for char in token)
                pieces[value] = min(token_id, pieces.get(value, token_id))
    elif "ByteFallback" in types:
        byte_tokens: dict[bytes, int] = {}
        for token, token_id in vocab.items():
            if token_id in added:
                continue
            byte = byte_token_value(token)
            if byte is not None:
                value = bytes([byte])
                byte_tokens[value] = min(token_id, byte_tokens.get(value, token_id))
            else:
                value = token.replace("\u2581", " ").encode()
            pieces[value] = min(token_id, pieces.get(value, token_id))
        pieces.update(byte_tokens)  # a single byte is spelled with its byte token (a byte run)
    if not all(bytes([byte]) in pieces for byte in range(256)):
        return {}
    return pieces


@attrs.frozen(eq=False)
class Vocabulary:
    """What the strategies know about one tokenizer's ids. Build it once with :meth:`of`."""

    size: int
    """Valid ids are ``0 <= id < size``."""
    added_ids: tuple[int, ...]
    """Added tokens (special ones and others)."""
    edge_ids: tuple[int, ...]
    """Ids where detokenizers go wrong: added tokens, tokens that decode alone to "" or to text with
    U+FFFD or only whitespace, single-byte tokens, punctuation and words that space cleanup
    rewrites, the pieces of characters split over several tokens."""
    pieces: Mapping[bytes, int] = attrs.field(repr=False)
    """Token ids by the bytes they stand for (byte-level and byte-fallback vocabularies, where every
    byte has a token; a single byte by its ``<0xNN>`` token in the latter); empty for other
    vocabularies."""
    encode: Callable[[str], list[int]] = attrs.field(repr=False)
    """The tokenizer's encoding of a text, without special tokens."""
    encode_prompt: Callable[[str], list[int]] = attrs.field(repr=False)
    """The same with the special tokens the tokenizer adds (a BOS, for one), as a prompt is encoded."""
    chat: Callable[[str], list[int]] | None = attrs.field(default=None, repr=False)
    """The ids of a one-message chat (the text as the user's message) rendered by the tokenizer's
    own chat template with the generation prompt; None without a chat template."""

    @classmethod
    def of(cls, tokenizer: TokenizerLike) -> Vocabulary:
        """Read a tokenizer (with a ``tokenizers`` backend) once."""
        backend = _backend(tokenizer)
        by_token = backend.get_vocab(with_added_tokens=True)
        size = max(by_token.values(), default=-1) + 1
        added = set(backend.get_added_tokens_decoder())

        def encode(text: str) -> list[int]:
            return list(backend.encode(text, add_special_tokens=False).ids)

        def encode_prompt(text: str) -> list[int]:
            return list(backend.encode(text, add_special_tokens=True).ids)

        alone = backend.decode_batch([[i] for i in range(size)], skip_special_tokens=False)
        edges = set(added)
        edges.update(i for i, text in enumerate(alone) if text.strip() == "" or "\ufffd" in text)
        pieces = _pieces(backend, added)
        edges.update(pieces[bytes([byte])] for byte in range(256) if bytes([byte]) in pieces)
        for text in _EDGE_TEXTS:
            edges.update(encode(text))
        edges.update(token_id for token, token_id in by_token.items() if token in _EDGE_TOKENS)
        return cls(
            size,
            tuple(sorted(added)),
            tuple(sorted(edges)),
            MappingProxyType(pieces),
            encode,
            encode_prompt,
            _chat(tokenizer, encode),
        )

    def spell(self, data: bytes) -> list[int]:
        """Ids that stand for ``data``: one token if the vocabulary has it, else one per byte.

        Needs :attr:`pieces` (raises ``ValueError`` for a vocabulary without byte tokens).
        """
        if not self.pieces:
            raise ValueError("this vocabulary has no byte tokens")
        whole = self.pieces.get(data)
        return [whole] if whole is not None else [self.pieces[bytes([byte])] for byte in data]


def _chat(tokenizer: object, encode: Callable[[str], list[int]]) -> Callable[[str], list[int]] | None:
    """A renderer of one-message chats, if the tokenizer has a chat template that renders one."""
    apply = getattr(tokenizer, "apply_chat_template", None)
    if not getattr(tokenizer, "chat_template", None) or not callable(apply):
        return None

    def chat(text: str) -> list[int]:
        conversation = [{"role": "user", "content": text}]
        return encode(str(apply(conversation, tokenize=False, add_generation_prompt=True)))

    try:
        chat("Hello")
    except Exception:  # a template that needs more than one user message: no chat prompts
        return None
    return chat


def _vocabulary(tokenizer: TokenizerLike | Vocabulary) -> Vocabulary:
    return tokenizer if isinstance(tokenizer, Vocabulary) else Vocabulary.of(tokenizer)


def whole_vocabulary(
    tokenizer: TokenizerLike | Vocabulary, max_size: int = 40
) -> st.SearchStrategy[list[int]]:
    """Ids from the whole vocabulary, half of them from :attr:`Vocabulary.edge_ids`."""
    vocabulary = _vocabulary(tokenizer)
    one = st.one_of(st.integers(0, vocabulary.size - 1), st.sampled_from(vocabulary.edge_ids))
    return st.lists(one, max_size=max_size)


def text_ids(
    tokenizer: TokenizerLike | Vocabulary, alphabet: str = MULTILINGUAL, max_size: int = 40
) -> st.SearchStrategy[list[int]]:
    """The tokenizer's own ids for random texts over ``alphabet`` (what a model generates)."""
    vocabulary = _vocabulary(tokenizer)
    return st.text(st.sampled_from(sorted(set(alphabet))), max_size=max_size).map(vocabulary.encode)


def _fragments() -> st.SearchStrategy[bytes]:
    """UTF-8 pieces: whole multi-byte characters, their beginnings, and any single byte."""
    char = st.characters(min_codepoint=0x80, codec="utf-8").map(lambda c: c.encode())
    return st.one_of(
        char,
        char.flatmap(lambda data: st.integers(1, len(data) - 1).map(lambda n: data[:n])),
        st.integers(0, 255).map(lambda b: bytes([b])),
    )


def byte_runs(tokenizer: TokenizerLike | Vocabulary, max_size: int = 12) -> st.SearchStrategy[list[int]]:
    """Runs of single-byte tokens: valid characters, truncated ones, lone continuation and invalid
    bytes (byte-level and byte-fallback vocabularies; nothing for others).
    """
    vocabulary = _vocabulary(tokenizer)
    if not vocabulary.pieces:
        return st.nothing()
    byte_id = {byte: vocabulary.pieces[bytes([byte])] for byte in range(256)}
    return st.lists(_fragments(), max_size=max_size).map(
        lambda parts: [byte_id[byte] for part in parts for byte in part]
    )


def special_ids(tokenizer: TokenizerLike | Vocabulary, max_size: int = 20) -> st.SearchStrategy[list[int]]:
    """Added and special tokens mixed with ordinary text ids (nothing if there are no added tokens)."""
    vocabulary = _vocabulary(tokenizer)
    if not vocabulary.added_ids:
        return st.nothing()
    ordinary = sorted(set(vocabulary.encode(MULTILINGUAL)))
    one = st.one_of(st.sampled_from(vocabulary.added_ids), st.sampled_from(ordinary))
    return st.lists(one, max_size=max_size)


def _cut(data: bytes, cuts: Sequence[bool]) -> list[bytes]:
    parts, start = [], 0
    for index, cut in enumerate(cuts, 1):
        if cut:
            parts.append(data[start:index])
            start = index
    parts.append(data[start:])
    return parts


def split_characters(
    tokenizer: TokenizerLike | Vocabulary, texts: Sequence[str] = ADVERSARIAL_TEXTS
) -> st.SearchStrategy[list[int]]:
    """One of ``texts``, as the tokenizer encodes it or (with byte tokens) spelled with every
    character's bytes cut over several tokens; sometimes without its last ids (a stream that ends
    inside a character). Shrinks towards the first text, its own encoding, and fewer cuts.
    """
    vocabulary = _vocabulary(tokenizer)
    if not texts:
        raise ValueError("split_characters needs at least one text")

    @st.composite
    def split(draw: st.DrawFn) -> list[int]:
        text = draw(st.sampled_from(texts))
        if bool(vocabulary.pieces) and draw(st.booleans()):
            ids: list[int] = []
            for char in text:
                data = char.encode()
                cuts = [draw(st.booleans()) for _ in range(len(data) - 1)]
                for part in _cut(data, cuts):
                    ids.extend(vocabulary.spell(part))
        else:
            ids = vocabulary.encode(text)
        dropped = draw(st.integers(0, min(3, len(ids))))
        return ids[: len(ids) - dropped]

    return split()


def token_ids(tokenizer: TokenizerLike | Vocabulary, max_size: int = 40) -> st.SearchStrategy[list[int]]:
    """All of the above: split characters, text, byte runs, specials, the whole vocabulary.

    The default input of a conformance search; counterexamples shrink towards the earlier kinds.
    """
    vocabulary = _vocabulary(tokenizer)
    return st.one_of(
        split_characters(vocabulary),
        text_ids(vocabulary, max_size=max_size),
        byte_runs(vocabulary),
        special_ids(vocabulary),
        whole_vocabulary(vocabulary, max_size=max_size),
    )


def prompt_ids(
    tokenizer: TokenizerLike | Vocabulary, alphabet: str = MULTILINGUAL, max_size: int = 30
) -> st.SearchStrategy[list[int]]:
    """Prompts as engines send them, for continuation checks: text ending in one of
    :data:`PROMPT_ENDINGS` (encoded with or without the tokenizer's own special tokens), the same
    followed by a run of byte tokens (whole characters, incomplete ones, single bytes: a held
    byte-fallback run, a character the prompt ends inside), or by an added token and an ending, a
    one-message chat rendered by the tokenizer's chat template (if it has one), and any ids.
    Shrinks towards short plain text.
    """
    vocabulary = _vocabulary(tokenizer)
    text = st.text(st.sampled_from(sorted(set(alphabet))), max_size=max_size)
    ending = st.sampled_from(PROMPT_ENDINGS)

    def encoded(parts: tuple[str, str, bool]) -> list[int]:
        body, end, with_specials = parts
        return (vocabulary.encode_prompt if with_specials else vocabulary.encode)(body + end)

    plain = st.tuples(text, ending, st.booleans()).map(encoded)
    kinds = [plain]
    if vocabulary.pieces:
        spell = vocabulary.spell
        tails = st.lists(_fragments(), min_size=1, max_size=4)
        kinds.append(st.tuples(plain, tails).map(lambda p: p[0] + [i for part in p[1] for i in spell(part)]))
    if vocabulary.added_ids:
        added = st.sampled_from(vocabulary.added_ids)
        kinds.append(st.tuples(plain, added, ending).map(lambda p: [*p[0], p[1], *vocabulary.encode(p[2])]))
    if vocabulary.chat is not None:
        kinds.append(text.map(vocabulary.chat))
    kinds.append(whole_vocabulary(vocabulary, max_size=max_size))
    return st.one_of(*kinds)
