"""``codec_for(..., out_of_vocab="ignore")``: ids past the vocabulary decode as ``tokenizer.decode``
decodes them.

Models pad their embedding table past the tokenizer's vocabulary, and samplers do pick those ids.
The ``tokenizers`` crate looks each id up and skips the ones it has no token for, before any
decoder runs, so such an id behaves exactly as if it were absent: inside a byte-fallback run, in
the middle of a split character, as the first token. The core does the same: an ignored id
changes nothing and adds no text. Ids from 2**32 on are refused (the crate cannot take them:
``tokenizer.decode`` raises ``OverflowError``), and so are negative and non-integer ids.

A tokenizer that decodes in Python may not skip such ids (``ByT5Tokenizer`` raises
``ValueError``), and "ignore" must never silently differ from its decode: ``codec_for`` probes the
tokenizer's own decode with ids past the vocabulary and refuses the option where it does not
ignore them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import attrs

from puredetok._core.codec import ID_LIMIT, Codec


def _probes(size: int) -> list[tuple[list[int], list[int]]]:
    """Pairs of sequences whose decodes must be equal if ids past the vocabulary are ignored."""
    outside = [size, size + 1, ID_LIMIT - 1]
    inside = list(range(0, size, max(1, size // 16)))[:16]
    pairs: list[tuple[list[int], list[int]]] = [([n], []) for n in outside]
    for at in (0, len(inside) // 2, len(inside)):
        pairs.append((inside[:at] + outside[:2] + inside[at:], inside))
    return pairs


def ignoring_out_of_vocab(codec: Codec, decode: Callable[[list[int]], str], name: str) -> Codec:
    """``codec``, ignoring ids in ``[vocab_size, 2**32)`` (with its own fingerprint).

    ``decode`` is the tokenizer's own decode with the codec's options bound; ``name`` names the
    tokenizer's type. Raises ``ValueError`` if ``decode`` does not ignore them (it raises, or its text
    changes), naming the sequence it was probed with.
    """
    for probe, expected in _probes(codec.vocab_size):
        try:
            text, wanted = decode(probe), decode(expected)
        except Exception as error:  # any failure of a foreign decode means "does not ignore"
            problem = f"raised {type(error).__name__}: {error}"
        else:
            if text == wanted:
                continue
            problem = f"gave {text!r} instead of {wanted!r}"
        raise ValueError(
            f"out_of_vocab='ignore' needs a tokenizer whose decode skips ids past its vocabulary "
            f"(size {codec.vocab_size}), but {name}.decode({probe}) {problem}; "
            "use out_of_vocab='raise'"
        )
    return attrs.evolve(codec, out_of_vocab="ignore", fingerprint=ignoring_fingerprint(codec.fingerprint))


def ignoring_fingerprint(fingerprint: str) -> str:
    """The fingerprint of a codec that ignores ids past the vocabulary, from its own."""
    return hashlib.sha256(f"{fingerprint}\x1dout_of_vocab=ignore".encode()).hexdigest()[:32]
