"""Small synthetic tokenizers, built with the ``tokenizers`` library, for cases real ones lack."""

from __future__ import annotations

from collections.abc import Callable

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models

from puredetok.core.decoders.byte_level import byte_alphabet

SP = "\u2581"


def _with_added(tokenizer: Tokenizer) -> Tokenizer:
    tokenizer.add_special_tokens([AddedToken("<|end|>", special=True), AddedToken("<s>", special=True)])
    tokenizer.add_tokens([AddedToken("  two ", normalized=False), AddedToken(f"{SP}x{SP}", normalized=False)])
    return tokenizer


def byte_level() -> Tokenizer:
    """All 256 bytes, partial characters, a literal U+FFFD, a hole, specials and added tokens with spaces."""
    alphabet = byte_alphabet()
    vocab = {alphabet[b]: b for b in range(256)}
    extra = [
        "ĠðŁ",  # " " + the first two bytes of a 4-byte emoji
        "¦©",  # bytes A6 A9: completes 🦩 after "ĠðŁ"
        "ï¿½",  # EF BF BD: a literal U+FFFD
        "ãģ",  # E3 81: most of a kana
        "Ģ",  # lone continuation byte 0x80? (Ģ is byte 0x22? see the alphabet) - any single char
        "íł",  # ED A0: a surrogate lead, invalid at once
        "Ġhello",
        "ĠĠ",
        "Ġ.",
    ]
    for offset, token in enumerate(extra):
        vocab.setdefault(token, 300 + offset)  # ids 256..299 are a hole: the decode drops them
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer = _with_added(tokenizer)
    tokenizer.add_tokens([AddedToken("Ġadded", normalized=False)])
    return tokenizer


def _sentencepiece_vocab() -> dict[str, int]:
    vocab = {"<unk>": 0}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for token in (
        SP,
        f"{SP}{SP}",
        f"{SP}a",
        "a",
        "b",
        "ab",
        ".",
        f"{SP}.",
        "<0xZZ>",
        "<0x4>",
        "<0x+A>",
        " ",
        "x  ",
    ):
        vocab[token] = len(vocab)
    return vocab


def _sentencepiece_with(decoder: decoders.Decoder) -> Tokenizer:
    tokenizer = Tokenizer(
        models.BPE(vocab=_sentencepiece_vocab(), merges=[], unk_token="<unk>", byte_fallback=True)
    )
    tokenizer.decoder = decoder
    return _with_added(tokenizer)


def sentencepiece() -> Tokenizer:
    """Llama-2's decoder chain over a tiny vocabulary with every byte token."""
    return _sentencepiece_with(
        decoders.Sequence(
            [decoders.Replace(SP, " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
    )


def fragment_stages() -> Tokenizer:
    """Decoders after Fuse that must work on a joined stream: Strip at both ends, a two-character
    Replace, Metaspace."""
    return _sentencepiece_with(
        decoders.Sequence(
            [
                decoders.ByteFallback(),
                decoders.Fuse(),
                decoders.Strip(SP, 2, 1),
                decoders.Replace("ab", "X"),
                decoders.Metaspace(SP, "always", True),
            ]
        )
    )


def tokenwise() -> Tokenizer:
    """A chain with no memory at all: per-token Replace and Strip (no Fuse)."""
    return _sentencepiece_with(decoders.Sequence([decoders.Replace(SP, " "), decoders.Strip(" ", 1, 1)]))


def metaspace_never() -> Tokenizer:
    """Metaspace with the prepend scheme ``never`` (every ``▁`` is a space)."""
    return _sentencepiece_with(decoders.Metaspace(SP, "never", True))


def no_decoder() -> Tokenizer:
    """No decoder: tokens are joined with spaces."""
    tokenizer = Tokenizer(models.BPE(vocab=_sentencepiece_vocab(), merges=[], unk_token="<unk>"))
    return _with_added(tokenizer)


def wordpiece(cleanup: bool = True) -> Tokenizer:
    """WordPiece pieces, with and without the decoder's own cleanup."""
    words = [
        "[UNK]",
        "it",
        "'",
        "s",
        "##s",
        "n",
        "##'t",
        "do",
        "not",
        ".",
        ",",
        "?",
        "!",
        "'m",
        "ve",
        "re",
        "a",
        "##b",
    ]
    tokenizer = Tokenizer(models.WordPiece(vocab={w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.decoder = decoders.WordPiece("##", cleanup)
    return _with_added(tokenizer)


def unmodelled_regex() -> Tokenizer:
    """A Replace decoder with a regex pattern: no exact model, so the window codec is used."""
    return _sentencepiece_with(decoders.Sequence([decoders.Replace(Regex("a+"), "A"), decoders.Fuse()]))


def unmodelled_ctc() -> Tokenizer:
    """The CTC decoder (speech models): no exact model."""
    words = ["<pad>", "|", "a", "b", "c", "ab", "."]
    tokenizer = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    tokenizer.decoder = decoders.CTC("<pad>", "|", True)
    return tokenizer


EXACT: dict[str, Callable[[], Tokenizer]] = {
    "byte_level": byte_level,
    "sentencepiece": sentencepiece,
    "fragment_stages": fragment_stages,
    "tokenwise": tokenwise,
    "metaspace_never": metaspace_never,
    "no_decoder": no_decoder,
    "wordpiece": wordpiece,
    "wordpiece_raw": lambda: wordpiece(cleanup=False),
}
"""Synthetic tokenizers puredetok models exactly."""

UNMODELLED: dict[str, Callable[[], Tokenizer]] = {"regex_replace": unmodelled_regex, "ctc": unmodelled_ctc}
"""Synthetic tokenizers whose decoder has no exact model."""
