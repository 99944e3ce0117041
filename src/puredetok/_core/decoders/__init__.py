"""One module per ``tokenizers`` decoder: its per-token map and, where it needs memory, its stage.

========================  ===========================================================
module                    decoder
========================  ===========================================================
:mod:`.byte_level`        ``ByteLevel`` (token characters stand for bytes; lossy UTF-8)
:mod:`.byte_fallback`     ``ByteFallback`` (``<0xNN>`` runs)
:mod:`.fuse`              ``Fuse`` (join into one element)
:mod:`.strip`             ``Strip``
:mod:`.replace`           ``Replace`` with a literal pattern
:mod:`.metaspace`         ``Metaspace``
:mod:`.wordpiece`         ``WordPiece``
:mod:`.bpe`               ``BPEDecoder``
:mod:`.ctc`               ``CTC``
:mod:`.spaces`            no decoder (tokens joined with spaces)
:mod:`.cleanup`           ``transformers``' and WordPiece's space cleanup
:mod:`.whitespace`        Python's ``str.strip()`` of the whole text
========================  ===========================================================

A decoder's JSON configuration is read into these models by :mod:`puredetok._build.config`.
"""

from __future__ import annotations

__all__ = ["Decoder", "Stage", "Unmodelled"]

from puredetok._core.decoders.base import Decoder, Stage, Unmodelled
