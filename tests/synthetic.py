"""Small synthetic tokenizers, built with the ``tokenizers`` library, for cases real ones lack: one
or more for every decoder type and option of the library, configurations puredetok must not treat
as known, and adversarial decoders (plain Python objects) for the generic fallback."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models

from puredetok._core.decoders.byte_level import byte_alphabet

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


CTC_WORDS = [
    "<pad>",
    "|",
    "a",
    "b",
    "c",
    "ab",
    ".",
    " .",
    "a<pad>b",
    "|x|",
    "do",
    " not",
    "n't",
    " 's",
    "<pad><pad>",
    "|<pad>",
]


def ctc(cleanup: bool = True) -> Tokenizer:
    """The CTC decoder (speech models): grouping, pad tokens inside tokens, the delimiter, cleanup."""
    tokenizer = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(CTC_WORDS)}, unk_token="<pad>"))
    tokenizer.decoder = decoders.CTC("<pad>", "|", cleanup)
    return _with_added(tokenizer)


def ctc_then_metaspace() -> Tokenizer:
    """CTC followed by Metaspace: the grouping's elements reach a decoder with a first-element rule."""
    tokenizer = Tokenizer(
        models.WordLevel(vocab={w: i for i, w in enumerate([*CTC_WORDS, SP, f"{SP}a"])}, unk_token="<pad>")
    )
    tokenizer.decoder = decoders.Sequence(
        [decoders.CTC("<pad>", "|", False), decoders.Metaspace(SP, "always", True)]
    )
    return tokenizer


SUFFIX_WORDS = [
    "a",
    "b",
    "ab",
    "a</w>",
    "b</w>",
    "ab</w>",
    "</w>",
    "</",
    "w>",
    "</w",
    ">",
    "x</w>y",
    " ",
    "w",
    "<",
]


def bpe_suffix(suffix: str = "</w>") -> Tokenizer:
    """BPEDecoder: a word-final suffix that becomes a space, except at the very end; tokens that
    spell the suffix over several tokens, or hold it in the middle."""
    words = [w.replace("</w>", suffix) for w in SUFFIX_WORDS]
    tokenizer = Tokenizer(
        models.BPE(
            vocab={w: i for i, w in enumerate(dict.fromkeys(words))}, merges=[], end_of_word_suffix=suffix
        )
    )
    tokenizer.decoder = decoders.BPEDecoder(suffix)
    return _with_added(tokenizer)


def bpe_suffix_after_byte_fallback() -> Tokenizer:
    """BPEDecoder after ByteFallback: the suffix rule over the byte runs' elements."""
    tokenizer = _sentencepiece_with(decoders.Sequence([decoders.ByteFallback(), decoders.BPEDecoder("b")]))
    return tokenizer


def byte_fallback_alone() -> Tokenizer:
    """ByteFallback with nothing after it: each run and each token stays its own element."""
    return _sentencepiece_with(decoders.ByteFallback())


def metaspace(scheme: str, split: bool = True) -> Tokenizer:
    """Metaspace with a prepend scheme and split option."""
    return _sentencepiece_with(decoders.Metaspace(SP, scheme, split))


def strip_both_ends() -> Tokenizer:
    """Strip of two characters at both ends of the joined output."""
    return _sentencepiece_with(
        decoders.Sequence(
            [decoders.Replace(SP, " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 2, 2)]
        )
    )


def suffix_not_undone() -> Tokenizer:
    """A BPE model with an end-of-word suffix that its decoder (ByteLevel) keeps: not a known one."""
    alphabet = byte_alphabet()
    vocab = {alphabet[b]: b for b in range(256)}
    vocab.update({"a</w>": 256, "</w>": 257})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], end_of_word_suffix="</w>"))
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def prefix_not_undone() -> Tokenizer:
    """A BPE model with a continuing-subword prefix and no WordPiece decoder: not a known one."""
    vocab = {w: i for i, w in enumerate(["a", "b", "##a", "##b"])}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], continuing_subword_prefix="##"))
    tokenizer.decoder = decoders.Fuse()
    return tokenizer


def wordpiece_after_fuse() -> Tokenizer:
    """WordPiece after Fuse (its marker only works on whole tokens): not modelled."""
    return _sentencepiece_with(decoders.Sequence([decoders.Fuse(), decoders.WordPiece("##", True)]))


EXACT: dict[str, Callable[[], Tokenizer]] = {
    "byte_level": byte_level,
    "sentencepiece": sentencepiece,
    "fragment_stages": fragment_stages,
    "tokenwise": tokenwise,
    "metaspace_never": metaspace_never,
    "no_decoder": no_decoder,
    "wordpiece": wordpiece,
    "wordpiece_raw": lambda: wordpiece(cleanup=False),
    "wordpiece_prefix": lambda: _with_prefix(wordpiece(), "@@"),
    "ctc": ctc,
    "ctc_raw": lambda: ctc(cleanup=False),
    "ctc_then_metaspace": ctc_then_metaspace,
    "bpe_suffix": bpe_suffix,
    "bpe_suffix_at": lambda: bpe_suffix("@@"),
    "bpe_suffix_after_byte_fallback": bpe_suffix_after_byte_fallback,
    "byte_fallback_alone": byte_fallback_alone,
    "metaspace_first": lambda: metaspace("first"),
    "metaspace_always_unsplit": lambda: metaspace("always", split=False),
    "strip_both_ends": strip_both_ends,
}
"""Synthetic tokenizers puredetok models exactly: every decoder type and option of ``tokenizers``."""

PANICKING = frozenset({"tokenwise", "fragment_stages", "strip_both_ends"})
"""Synthetic tokenizers whose decode panics on some inputs (tokenizers 0.23's Strip with a stop);
their exact codecs are compared only where the decode answers, and the fallback, which decodes
windows the full decode never sees, is not run on them."""

UNMODELLED: dict[str, Callable[[], Tokenizer]] = {
    "regex_replace": unmodelled_regex,
    "suffix_not_undone": suffix_not_undone,
    "prefix_not_undone": prefix_not_undone,
    "wordpiece_after_fuse": wordpiece_after_fuse,
}
"""Synthetic tokenizers whose configuration puredetok does not treat as known."""


def _with_prefix(tokenizer: Tokenizer, prefix: str) -> Tokenizer:
    """The same vocabulary with another continuation prefix, in the model and the decoder."""
    vocab = {
        token.replace("##", prefix): i for token, i in tokenizer.get_vocab(with_added_tokens=False).items()
    }
    rebuilt = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", continuing_subword_prefix=prefix))
    rebuilt.decoder = decoders.WordPiece(prefix, True)
    return _with_added(rebuilt)


class DecodeFunction:
    """An adversarial tokenizer for the generic fallback: a vocabulary of strings and a ``decode``
    written in Python (no ``tokenizers`` backend), with specials that ``skip_special_tokens``
    drops."""

    def __init__(
        self, name: str, vocab: Sequence[str], join: Callable[[list[str]], str], specials: Sequence[str]
    ) -> None:
        self.name_or_path = name
        self.vocab = list(vocab)
        self.join = join
        self.specials = set(specials)
        self.all_special_ids = [i for i, token in enumerate(self.vocab) if token in self.specials]

    def decode(
        self, ids: list[int], skip_special_tokens: bool = False, clean_up_tokenization_spaces: Any = None
    ) -> str:
        tokens = [self.vocab[i] for i in ids]
        if skip_special_tokens:
            tokens = [t for t in tokens if t not in self.specials]
        return self.join(tokens)

    def get_vocab(self) -> dict[str, int]:
        return {token: i for i, token in enumerate(self.vocab)}

    def __len__(self) -> int:
        return len(self.vocab)


_WORDS = [
    "a",
    "b",
    "cat",
    " ",
    "  ",
    ".",
    ",",
    "'",
    "n't",
    " the",
    "\n",
    "<s>",
    "</s>",
    "⇧",
    "x y",
    "7",
    "0.5",
]


def _bytes_vocab() -> list[str]:
    return [chr(b) for b in range(256)] + ["<s>", "</s>", "<pad>"]


def _bytes_join(errors: str) -> Callable[[list[str]], str]:
    def join(tokens: list[str]) -> str:
        data = b"".join(t.encode() if len(t) > 1 else bytes([ord(t)]) for t in tokens)
        return data.decode("utf-8", errors)

    return join


def _case_marker(tokens: list[str]) -> str:
    text = "".join(tokens)
    out, upper = [], False
    for char in text:
        if char == "⇧":
            upper = True
            continue
        out.append(char.upper() if upper else char)
        upper = False
    return "".join(out)


def _grouped(tokens: list[str]) -> str:
    kept = [t for i, t in enumerate(tokens) if i == 0 or t != tokens[i - 1]]
    return "".join(" " if t == "|" else t for t in kept if t != "<pad>").strip()


def _cleanup(tokens: list[str]) -> str:
    from puredetok._core.decoders.cleanup import TRANSFORMERS_RULES, apply_rules

    return apply_rules(TRANSFORMERS_RULES, " ".join(tokens))


def _first_upper(tokens: list[str]) -> str:
    text = "".join(tokens).lstrip()
    return text[:1].upper() + text[1:]


ADVERSARIAL: dict[str, Callable[[], DecodeFunction]] = {
    "strip_ends": lambda: DecodeFunction("strip_ends", _WORDS, lambda t: "".join(t).strip(), ["<s>", "</s>"]),
    "case_marker": lambda: DecodeFunction("case_marker", _WORDS, _case_marker, ["<s>"]),
    "bytes_replace": lambda: DecodeFunction(
        "bytes_replace", _bytes_vocab(), _bytes_join("replace"), ["<s>", "</s>", "<pad>"]
    ),
    "bytes_ignore": lambda: DecodeFunction(
        "bytes_ignore", _bytes_vocab(), _bytes_join("ignore"), ["<s>", "</s>", "<pad>"]
    ),
    "grouped_blank": lambda: DecodeFunction(
        "grouped_blank", ["<pad>", "|", "A", "B", "[UNK]", "<s>"], _grouped, ["<s>", "<pad>"]
    ),
    "joined_with_cleanup": lambda: DecodeFunction("joined_with_cleanup", _WORDS, _cleanup, ["<s>", "</s>"]),
    "first_upper": lambda: DecodeFunction("first_upper", _WORDS, _first_upper, ["<s>"]),
}
"""Python decoders the fallback must stay prefix-safe on: text that a later token changes (a strip
at both ends, a case marker, bytes that complete or spoil a character, grouping with a blank, space
cleanup, a rule on the first letter)."""
