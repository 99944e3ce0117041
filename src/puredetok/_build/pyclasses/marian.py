"""``MarianTokenizer``, read: SentencePiece without a ``tokenizers`` backend. Each piece becomes the
value :class:`~puredetok._core.pyclasses.marian.MarianStage` takes (whose module says how Marian
decodes), from the ``sentencepiece`` model's own settings (:mod:`.spm`).
"""

from __future__ import annotations

from typing import Any

from puredetok._build.compile import compile_chain
from puredetok._build.pyclasses.base import ClassModel, Given, special_ids
from puredetok._build.pyclasses.spm import read_settings
from puredetok._core.decoders.base import Stage, Unmodelled
from puredetok._core.decoders.cleanup import cleanup_stages
from puredetok._core.decoders.whitespace import StripStage
from puredetok._core.pyclasses.marian import BYTE, CONTROL, SPECIAL, TEXT, MarianStage

_SPACE = "\u2581"


def piece_value(sp: Any, token: str, settings: Any) -> tuple[Any, ...]:
    """What :class:`MarianStage` takes for one piece of the ``SentencePieceProcessor`` ``sp``."""
    piece_id = sp.piece_to_id(token)
    if sp.is_control(piece_id):
        return (CONTROL,)
    if sp.is_unknown(piece_id):
        surface = settings.unknown_surface if sp.id_to_piece(piece_id) == token else token
        surface = surface.replace(_SPACE, " ")
        return (TEXT, surface, surface, False)
    if sp.is_byte(piece_id):
        if len(token) != 6 or not token.startswith("<0x") or not token.endswith(">"):
            raise Unmodelled(f"the SentencePiece byte piece {token!r}")
        return (BYTE, int(token[3:5], 16))
    later = token.replace(_SPACE, " ")
    if settings.strips_first_space and token.startswith(_SPACE):
        return (TEXT, later, token[1:].replace(_SPACE, " "), not settings.strips_every_first_space)
    return (TEXT, later, later, False)


def _token(tokenizer: Any, sp: Any, token_id: int) -> str:
    """``MarianTokenizer.convert_ids_to_tokens`` for one id, as ``decode`` sees it (an id outside
    the vocabulary file is looked up in the SentencePiece model ``decode`` uses).
    """
    added = tokenizer.added_tokens_decoder
    if token_id in added:
        return str(added[token_id].content)
    if token_id in tokenizer.decoder:
        return str(tokenizer.decoder[token_id])
    if not 0 <= token_id < sp.get_piece_size():
        raise Unmodelled(f"Marian id {token_id} is neither in its vocabulary nor in its SentencePiece model")
    return str(sp.id_to_piece(token_id) or tokenizer.unk_token)


def marian_model(tokenizer: Any, *, size: int, skip: bool, cleanup: bool) -> ClassModel:
    """The model of a ``MarianTokenizer``."""
    sp = tokenizer.spm_target if tokenizer.separate_vocabs else tokenizer.spm_source
    settings = read_settings(sp.serialized_model_proto())
    special = set(tokenizer.all_special_tokens)
    dropped = special_ids(tokenizer) if skip else frozenset()
    values: list[tuple[Any, ...] | None] = []
    for token_id in range(size):
        if token_id in dropped:
            values.append(None)
            continue
        token = _token(tokenizer, sp, token_id)
        if token in special:
            values.append((SPECIAL, (token + " ").replace(_SPACE, " ")))
        else:
            values.append(piece_value(sp, token, settings))
    tail: list[Stage] = [StripStage()]
    if cleanup:
        tail.extend(cleanup_stages())
    chain = compile_chain([Given(MarianStage())], values, tail)
    description = "Marian: SentencePiece pieces between special tokens, strip" + (
        " + cleanup" if cleanup else ""
    )
    return ClassModel("marian", description, chain, values, fast_oracle=False)
