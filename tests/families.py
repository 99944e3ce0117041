"""Small tokenizers of the ``transformers`` classes that decode in Python, built at test time from
vocabularies written here or derived from the GPT-2 files in tests/data, and from tiny models
trained here with the ``tokenizers`` and ``sentencepiece`` libraries (deterministic: fixed corpus,
one thread). Nothing is downloaded; see tests/data/tokenizers/MANIFEST.md."""

from __future__ import annotations

import functools
import gzip
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

DATA = Path(__file__).parent / "data" / "tokenizers"

CORPUS = (
    "推理引擎 😀 streams text: naïve café, 1+1=2.\n第二行结束。 日本語のテキストを、ひらがなとカタカナで。",
    "한국어 텍스트도 스트리밍됩니다. ภาษาไทยก็ได้ครับ Ελληνικά Русский текст 🏳️‍🌈👍🏽 ┌──┐ it's don't .",
    "A photo of a cat sitting on a mat. The quick brown fox jumps over the lazy dog!",
    "Hello world, this is a small corpus for tiny tokenizers; it has words, numbers 0 1 2 3 45 678 and",
    "punctuation ? ! , . ' \" ( ) [ ] and some repeated words words words to merge merge merge.",
    "Ein kleiner Satz auf Deutsch, une phrase en français, una frase en español.",
)
"""The text the tiny models are trained on (each line repeated)."""


def _scratch(name: str) -> Path:
    folder = Path(tempfile.gettempdir()) / "puredetok-test-families" / f"{name}-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@functools.cache
def gpt2_files() -> tuple[dict[str, int], list[str]]:
    """GPT-2's vocabulary and merges (tests/data/tokenizers/gpt2)."""
    vocab = json.loads(gzip.decompress((DATA / "gpt2" / "vocab.json.gz").read_bytes()))
    merges = gzip.decompress((DATA / "gpt2" / "merges.txt.gz").read_bytes()).decode("utf-8").splitlines()
    return vocab, [line for line in merges if line and not line.startswith("#version")]


def byt5() -> Any:
    """ByT5: the class needs no files (bytes, three specials, 125 sentinels)."""
    from transformers import ByT5Tokenizer

    return ByT5Tokenizer()


def whisper() -> Any:
    """A Whisper tokenizer over GPT-2's byte-level BPE, with Whisper's special tokens and a few
    timestamp tokens (added, not special, as in Whisper's own files)."""
    from tokenizers import AddedToken
    from transformers import WhisperTokenizer

    vocab, merges = gpt2_files()
    tok = WhisperTokenizer(vocab=dict(vocab), merges=[tuple(m.split(" ")) for m in merges])
    specials = ["<|startoftranscript|>", "<|en|>", "<|de|>", "<|transcribe|>", "<|translate|>"]
    specials += ["<|nocaptions|>", "<|notimestamps|>", "<|startofprev|>", "<|startoflm|>"]
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.add_tokens([AddedToken(f"<|{i * 0.02:.2f}|>", special=False, normalized=False) for i in range(51)])
    return tok


def _train_suffix_bpe(vocab_size: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A byte-level BPE whose word-final tokens end in ``</w>``, trained on the corpus (CLIP-style)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(end_of_word_suffix="</w>", continuing_subword_prefix=""))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|startoftext|>", "<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        end_of_word_suffix="</w>",
        show_progress=False,
    )
    tok.train_from_iterator([line for line in CORPUS for _ in range(3)], trainer)
    state = json.loads(tok.to_str())
    merges = [
        cast(tuple[str, str], tuple(m.split(" ") if isinstance(m, str) else m))
        for m in state["model"]["merges"]
    ]
    return dict(state["model"]["vocab"]), merges


def clip() -> Any:
    """A CLIP tokenizer over a tiny ``</w>`` BPE trained here (every byte, and each with ``</w>``)."""
    from transformers import CLIPTokenizer

    vocab, merges = _train_suffix_bpe(700)
    vocab = dict(vocab)
    for char in list(vocab):
        if len(char) == 1 and char + "</w>" not in vocab:
            vocab[char + "</w>"] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=merges)


CTC_VOCAB = ["<pad>", "<s>", "</s>", "<unk>", "|", *"ETAONISRHDLUMWCFGYPBVK'XJQZ", "É", "ß", "Σ", "[UNK]"]


def _ctc(lower: bool, name: str) -> Any:
    from transformers import Wav2Vec2CTCTokenizer

    path = _scratch(name) / "vocab.json"
    vocab = {
        token: i for i, token in enumerate(dict.fromkeys(t for t in CTC_VOCAB if not (lower and t == "Σ")))
    }
    path.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return Wav2Vec2CTCTokenizer(str(path), do_lower_case=lower)


def wav2vec2() -> Any:
    """A wav2vec2 CTC tokenizer over capital letters, with pad (blank), word delimiter and [UNK]."""
    return _ctc(False, "wav2vec2")


def wav2vec2_lower() -> Any:
    """The same, lower-casing its output."""
    return _ctc(True, "wav2vec2-lower")


def _train_sentencepiece(name: str, vocab_size: int, **options: Any) -> Path:
    import sentencepiece

    folder = _scratch(name)
    prefix = folder / "spm"
    if not (folder / "spm.model").exists():
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter([line for line in CORPUS for _ in range(4)]),
            model_prefix=str(prefix),
            vocab_size=vocab_size,
            character_coverage=0.98,
            byte_fallback=True,
            num_threads=1,
            user_defined_symbols=["<sep>"],
            control_symbols=["<ctrl>"],
            minloglevel=2,
            **options,
        )
    return folder / "spm.model"


def marian(**options: Any) -> Any:
    """A Marian tokenizer over a tiny SentencePiece model (byte fallback on) trained here, with the
    vocabulary file Marian reads (the pieces, then ``<pad>``)."""
    import sentencepiece
    from transformers import MarianTokenizer

    name = "marian" + "".join(f"-{k}-{v}" for k, v in sorted(options.items()))
    model = _train_sentencepiece(name, 400, **options)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    vocab.setdefault("<pad>", len(vocab))
    vocab_path = model.parent / "vocab.json"
    vocab_path.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return MarianTokenizer(str(model), str(model), str(vocab_path))


FAMILIES: dict[str, Callable[[], Any]] = {
    "byt5": byt5,
    "whisper": whisper,
    "clip": clip,
    "wav2vec2": wav2vec2,
    "wav2vec2_lower": wav2vec2_lower,
    "marian": marian,
    "marian_keep_spaces": lambda: marian(remove_extra_whitespaces=False),
}
"""The class tokenizers the tests build, by name."""


@functools.cache
def family(name: str) -> Any:
    """The tokenizer, built once per test session."""
    return FAMILIES[name]()
