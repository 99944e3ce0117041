"""G3, measured: the largest hold-back per decoder family on real multilingual text.

The documented bounds (docs/guarantees.md):

* byte-level BPE: one incomplete UTF-8 sequence, at most 3 bytes (shown as one U+FFFD);
* SentencePiece with byte fallback: exactly the current run of byte tokens while it is still valid
  UTF-8 (it may yet be poisoned), nothing else; capped by ``max_byte_run`` if asked; where the
  installed transformers cleans its text too (before 5.7, with the cleanup asked for), at most 3
  characters more;
* Metaspace (T5) with transformers' cleanup: at most 3 characters (a proper prefix of " n't",
  " 've", " 're");
* WordPiece: nothing (its cleanup works on whole tokens); with transformers' cleanup on top, at
  most 3 characters.
"""

from __future__ import annotations

import pytest

import puredetok
from helpers import TOKENIZERS, codec, tokenizer
from puredetok import finish, start, step
from puredetok.testing.strategies import MULTILINGUAL

TEXTS = (
    MULTILINGUAL,
    "Hello, world! It's a test; don't stop. What ? Yes ! a , b . They 've gone, we 're here, I 'm ok",
    "🦩🏳️‍🌈👍🏽 鱻䨻 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ☃ ╔═╗ Ωmega ∑ ∫ → ⇒ ° ± × ÷ ½ ¾ ‰ €",
)

BOUND_IN_CHARACTERS = {"byte_level": 1, "metaspace": 3, "wordpiece": 0}


def _byte_run_lengths(name: str, ids: list[int]) -> list[int]:
    """For each prefix, the length of the run of byte tokens it ends with."""
    backend = tokenizer(name).backend_tokenizer
    runs, current = [], 0
    for token_id in ids:
        token = backend.id_to_token(token_id) or ""
        current = current + 1 if (len(token) == 6 and token.startswith("<0x")) else 0
        runs.append(current)
    return runs


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("cleanup", [None, True])
def test_largest_hold_back_per_family(name: str, cleanup: bool | None) -> None:
    c = puredetok.codec_for(tokenizer(name), clean_up_tokenization_spaces=cleanup)
    largest = 0
    for text in TEXTS:
        ids = list(tokenizer(name).encode(text, add_special_tokens=False))
        runs = _byte_run_lengths(name, ids)
        state = start(c)
        for index, token_id in enumerate(ids):
            state, _ = step(state, token_id)
            held = finish(state)
            if c.family == "sentencepiece":
                # Held text is exactly the open run of byte tokens (U+FFFD per byte if cut here), and
                # where the release cleans this family's text (transformers before 5.7, asked for
                # the cleanup) at most the 3 characters a cleanup may still change.
                cleaning = 3 if c.clean_up_tokenization_spaces else 0
                assert len(held) <= runs[index] + cleaning, (text, index, held)
                assert not held or runs[index] > 0 or cleaning
            largest = max(largest, len(held))
    if c.family == "sentencepiece":
        assert largest >= 4  # emoji runs are held whole on these texts
        return
    bound = BOUND_IN_CHARACTERS[c.family]
    if c.clean_up_tokenization_spaces:
        bound = max(bound, 3)
    assert largest <= bound, (c.family, largest)


def test_byte_level_never_holds_a_complete_character() -> None:
    c = codec("qwen3")
    for text in TEXTS:
        state = start(c)
        for token_id in tokenizer("qwen3").encode(text, add_special_tokens=False):
            state, _ = step(state, token_id)
            assert finish(state) in ("", "\ufffd")
