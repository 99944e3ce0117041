"""Random tokenizers for the search over decoder configurations (tests/core/test_random_tokenizers.py).

A :class:`Recipe` is a plain, printable description of one tokenizer: the model (``WordLevel`` or
``BPE``), its vocabulary (optionally every ``<0xNN>`` byte token and every character of the
byte-level alphabet, plus random pieces: ``▁``-prefixed, ``##`` pieces, ``</w>`` suffixes, spaces,
empty-looking and multi-script pieces, a literal U+FFFD, text that looks like a byte token), the
decoder as its JSON configuration (one of the library's decoders or a ``Sequence`` of 1-4 of them,
with random parameters), random added tokens with every flag, and whether it is wrapped in
``transformers``' ``PreTrainedTokenizerFast`` (with ``clean_up_tokenization_spaces`` either way).
A failing recipe's repr is a regression test's input: :func:`build` turns it back into the
tokenizer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, models

from puredetok._core.decoders.byte_level import byte_alphabet

SP = "\u2581"

Decoder = dict[str, Any]


@dataclass(frozen=True)
class Added:
    """One added token and its flags."""

    content: str
    special: bool = False
    normalized: bool = False
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False


@dataclass(frozen=True)
class Recipe:
    """A tokenizer, described as data (see the module's docstring)."""

    decoder: Decoder | None
    pieces: tuple[str, ...] = ()
    model: str = "BPE"
    byte_tokens: bool = False
    alphabet: bool = False
    byte_fallback: bool = False
    hole: int = 0
    added: tuple[Added, ...] = ()
    wrapped: bool | None = None
    """None: a bare ``tokenizers.Tokenizer``; else ``PreTrainedTokenizerFast`` with
    ``clean_up_tokenization_spaces`` set to it."""
    prefix: str | None = None
    """The BPE model's ``continuing_subword_prefix``."""
    suffix: str | None = None
    """The BPE model's ``end_of_word_suffix``."""
    roles: tuple[tuple[str, str], ...] = ()
    """Special tokens the ``transformers`` wrapper is given (``("eos_token", "<s>")``...)."""
    cleanup: bool | None = None
    """``codec_for``'s ``clean_up_tokenization_spaces`` (None: the tokenizer's own)."""

    def vocabulary(self) -> dict[str, int]:
        """The model's vocabulary: the byte tokens, the alphabet, then the pieces; ids from
        ``hole`` on are shifted by ten (ids that decode to nothing)."""
        tokens: list[str] = []
        if self.byte_tokens:
            tokens += [f"<0x{b:02X}>" for b in range(256)]
        if self.alphabet:
            alphabet = byte_alphabet()
            tokens += [alphabet[b] for b in range(256)]
        tokens += self.pieces
        unique = list(dict.fromkeys(tokens))
        return {t: i + (10 if self.hole and i >= self.hole else 0) for i, t in enumerate(unique)}


def build(recipe: Recipe) -> Any:
    """The tokenizer a recipe describes."""
    vocab = recipe.vocabulary()
    unk = next(iter(vocab))
    if recipe.model == "WordLevel":
        model: models.Model = models.WordLevel(vocab=vocab, unk_token=unk)
    elif recipe.model == "Unigram":
        scores = [(token, -1.0) for token in vocab]
        model = models.Unigram(scores, 0, byte_fallback=recipe.byte_fallback)
    else:
        affixes = {"continuing_subword_prefix": recipe.prefix, "end_of_word_suffix": recipe.suffix}
        model = models.BPE(
            vocab=vocab,
            merges=[],
            unk_token=unk,
            byte_fallback=recipe.byte_fallback,
            **{name: value for name, value in affixes.items() if value is not None},
        )
    tokenizer = Tokenizer(model)
    if recipe.decoder is not None:
        state = json.loads(tokenizer.to_str())
        state["decoder"] = recipe.decoder
        tokenizer = Tokenizer.from_str(json.dumps(state))
    for added in recipe.added:
        token = AddedToken(
            added.content,
            special=added.special,
            normalized=added.normalized,
            lstrip=added.lstrip,
            rstrip=added.rstrip,
            single_word=added.single_word,
        )
        if added.special:
            tokenizer.add_special_tokens([token])
        else:
            tokenizer.add_tokens([token])
    if recipe.wrapped is None:
        return tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, clean_up_tokenization_spaces=recipe.wrapped, **dict(recipe.roles)
    )


def size_of(tokenizer: Any) -> int:
    """One past the largest id of the tokenizer (added tokens included)."""
    raw = tokenizer if isinstance(tokenizer, Tokenizer) else tokenizer.backend_tokenizer
    return max(raw.get_vocab(with_added_tokens=True).values()) + 1


_CHARS = (
    "a",
    "b",
    "n",
    "t",
    "s",
    ".",
    ",",
    "'",
    "?",
    " ",
    "\u3000",
    "\n",
    "\t",
    SP,
    "_",
    "#",
    "|",
    "<",
    ">",
    "w",
    "é",
    "中",
    "🦩",
    "\ufffd",
    "Ġ",
    "Ċ",
    "ð",
    "Ł",
    "ã",
    "ģ",
    "Ã",
    "©",
    "\u200b",
    "\u0301",
)
_CORES = (
    "<0x41>",
    "<0xE4>",
    "<0xZZ>",
    "<0x4>",
    "<pad>",
    "</w>",
    "n't",
    "'s",
    "do",
    "not",
    "ðŁ",
    "¦©",
    "ï¿½",
    "íł",
    "Ġhello",
    "ĠĠ",
    "",
)

pieces = st.one_of(
    st.builds(
        lambda prefix, core, suffix: prefix + core + suffix,
        st.sampled_from(["", "", "", SP, "##", " ", "Ġ", "@@", "|"]),
        st.one_of(st.text(st.sampled_from(_CHARS), min_size=1, max_size=3), st.sampled_from(_CORES)),
        st.sampled_from(["", "", "", "</w>", SP, " ", "@@", "w"]),
    ),
    st.sampled_from(_CHARS),
)
"""One vocabulary piece."""

_STRING_PATTERNS = (SP, " ", "a", "ab", "</w>", "##", "  ", "Ġ", "<0x41>", "\ufffd")
_REGEX_PATTERNS = ("a+", " +", "\\s", SP, "^ ", "(.)\\1", "[ab]")
_MARKS = (SP, "_", " ", "a", "##", "")


def _decoder_strategies() -> dict[str, st.SearchStrategy[Decoder]]:
    flag = st.booleans()
    return {
        "ByteLevel": st.builds(
            lambda a, b, c: {"type": "ByteLevel", "add_prefix_space": a, "trim_offsets": b, "use_regex": c},
            flag,
            flag,
            flag,
        ),
        "Metaspace": st.builds(
            lambda r, s, split: {"type": "Metaspace", "replacement": r, "prepend_scheme": s, "split": split},
            st.sampled_from([SP, SP, "_", "a"]),
            st.sampled_from(["always", "never", "first"]),
            flag,
        ),
        "Replace": st.builds(
            lambda kind, pattern, content: {
                "type": "Replace",
                "pattern": {kind: pattern},
                "content": content,
            },
            st.just("String"),
            st.sampled_from(_STRING_PATTERNS),
            st.sampled_from([" ", "", SP, "b", "xx", "\ufffd"]),
        )
        | st.builds(
            lambda pattern, content: {"type": "Replace", "pattern": {"Regex": pattern}, "content": content},
            st.sampled_from(_REGEX_PATTERNS),
            st.sampled_from([" ", "", "b"]),
        ),
        "ByteFallback": st.just({"type": "ByteFallback"}),
        "Fuse": st.just({"type": "Fuse"}),
        "Strip": st.builds(
            lambda c, a, b: {"type": "Strip", "content": c, "start": a, "stop": b},
            st.sampled_from([" ", SP, "a", "<"]),
            st.integers(0, 3),
            st.integers(0, 3),
        ),
        "WordPiece": st.builds(
            lambda p, c: {"type": "WordPiece", "prefix": p, "cleanup": c},
            st.sampled_from(["##", "@@", SP, "a"]),
            flag,
        ),
        "BPEDecoder": st.builds(
            lambda s: {"type": "BPEDecoder", "suffix": s},
            st.sampled_from(["</w>", "@@", SP, "w", ""]),
        ),
        "CTC": st.builds(
            lambda p, w, c: {"type": "CTC", "pad_token": p, "word_delimiter_token": w, "cleanup": c},
            st.sampled_from(["<pad>", "|", "a"]),
            st.sampled_from(["|", SP, " ", "<pad>"]),
            flag,
        ),
    }


DECODERS = _decoder_strategies()
"""Each library decoder with random parameters, by its type name."""

one_decoder = st.one_of(*DECODERS.values())

_sequences = (
    st.integers(1, 4)
    .flatmap(lambda n: st.lists(one_decoder, min_size=n, max_size=n))
    .map(lambda ds: {"type": "Sequence", "decoders": ds})
)
decoders_ = st.integers(0, 5).flatmap(
    lambda n: st.none() if n == 0 else one_decoder if n == 1 else _sequences
)
"""No decoder, one, or a ``Sequence`` of 1-4."""

_ADDED_CONTENTS = (
    "<|end|>",
    "<s>",
    " two ",
    "<0x41>",
    "<0xE4>",
    "Ġx",
    f"{SP}x{SP}",
    "\n",
    "\ufffd",
    " ",
    "##a",
    "a</w>",
    "<pad>",
    "|",
    "n't",
    ".",
    "ðŁĺ",
    "中",
)


def added_tokens(contents: st.SearchStrategy[str]) -> st.SearchStrategy[Added]:
    """Added tokens with random flags and ``contents``."""
    flag = st.booleans()
    return st.builds(Added, contents, flag, flag, flag, flag, flag)


@st.composite
def recipes(draw: st.DrawFn) -> Recipe:
    """A random tokenizer recipe."""
    byte_tokens = draw(st.booleans())
    alphabet = draw(st.booleans())
    extra = tuple(draw(st.lists(pieces, min_size=0 if byte_tokens or alphabet else 1, max_size=40)))
    size = len(
        Recipe(None, extra, byte_tokens=byte_tokens, alphabet=alphabet).vocabulary()
    )  # before the hole
    model = draw(st.sampled_from(["BPE", "BPE", "WordLevel", "Unigram"]))
    own = st.sampled_from(extra) if extra else st.sampled_from(_ADDED_CONTENTS)
    contents = st.one_of(st.sampled_from(_ADDED_CONTENTS), pieces.filter(bool), own)
    roles = st.lists(
        st.tuples(st.sampled_from(["bos_token", "eos_token", "unk_token", "pad_token"]), contents),
        max_size=3,
        unique_by=lambda role: role[0],
    )
    wrapped = draw(st.sampled_from([None, None, True, False]))
    return Recipe(
        decoder=draw(decoders_),
        pieces=extra,
        model=model,
        byte_tokens=byte_tokens,
        alphabet=alphabet,
        byte_fallback=draw(st.booleans()),
        hole=0 if model == "Unigram" else draw(st.sampled_from([0, 0, 0, size // 2])),
        added=tuple(draw(st.lists(added_tokens(contents), max_size=6))),
        wrapped=wrapped,
        prefix=draw(st.sampled_from([None, None, None, "##", "@@"])) if model == "BPE" else None,
        suffix=draw(st.sampled_from([None, None, None, "</w>", "@@"])) if model == "BPE" else None,
        roles=() if wrapped is None else tuple(draw(roles)),
        cleanup=draw(st.sampled_from([None, None, True, False])),
    )
