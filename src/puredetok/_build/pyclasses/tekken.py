"""Tekken (mistral-common's ``Tekkenizer``) and ``tiktoken.Encoding``, read: every id's bytes by
rank, a Tekken control id's text (the stage, and how these decode, are
:mod:`puredetok._core.pyclasses.tekken`'s).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from puredetok._build.compile import compile_chain
from puredetok._build.pyclasses.base import ClassModel, Given
from puredetok._core.decoders.base import Unmodelled
from puredetok._core.decoders.byte_level import Utf8Stage
from puredetok._core.pyclasses.tekken import TekkenStage


def tekken_model(tokenizer: Any, *, skip: bool, tail: Iterable[Any] = (), suffix: str = "") -> ClassModel:
    """The model of a ``Tekkenizer``'s ``decode`` with ``SpecialTokenPolicy.IGNORE`` (``skip``) or
    ``KEEP``, read through its public per-id methods; ``tail`` stages run after it (a wrapper's
    own steps, named by ``suffix``).
    """
    controls = int(tokenizer.num_special_tokens)
    size = int(tokenizer.n_words)
    if not 0 <= controls <= size:
        raise Unmodelled(f"a Tekkenizer with {controls} control ids and {size} ids in all")
    values: list[bytes | str] = []
    for token_id in range(controls):
        # "".join gives the str itself: a token_str may be a str enum, whose str() is its name.
        values.append("" if skip else "".join([tokenizer.id_to_piece(token_id)]))
    piece = tokenizer.id_to_byte_piece
    values.extend(bytes(piece(token_id)) for token_id in range(controls, size))
    chain = compile_chain([Given(TekkenStage())], values, tuple(tail))
    policy = "IGNORE" if skip else "KEEP"
    description = (
        f"Tekken: byte-level BPE over tiktoken ranks after {controls} control ids ({policy}){suffix}"
    )
    return ClassModel("tekken", description, chain, values, fast_oracle=False)


def tiktoken_model(encoding: Any, *, skip: bool) -> ClassModel:
    """The model of ``tiktoken.Encoding.decode`` (``errors="replace"``); with ``skip``, of its decode
    of the ids without its special tokens' ids. An encoding with ids it cannot decode (gaps between
    its ranks and special tokens) is not modelled: such an id would have to raise mid-stream.
    """
    size = int(encoding.n_vocab)
    special = special_token_ids(encoding)
    single = encoding.decode_single_token_bytes
    values: list[bytes | None] = []
    for token_id in range(size):
        if skip and token_id in special:
            values.append(None)
            continue
        try:
            values.append(bytes(single(token_id)))
        except KeyError:
            raise Unmodelled(f"tiktoken encoding {encoding.name!r} has no token with id {token_id}") from None
    chain = compile_chain([Given(Utf8Stage())], values)
    description = "tiktoken: byte-level BPE over ranks" + (" without special tokens" if skip else "")
    return ClassModel("tiktoken", description, chain, values, fast_oracle=False)


def special_token_ids(encoding: Any) -> frozenset[int]:
    """The ids of a ``tiktoken.Encoding``'s special tokens."""
    return frozenset(int(encoding.encode_single_token(text)) for text in encoding.special_tokens_set)
