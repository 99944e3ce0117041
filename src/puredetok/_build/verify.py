"""The check ``codec_for`` runs before it claims exactness: the model against ``tokenizer.decode``.

A model is compared with the tokenizer's own decode on

* every id alone (in batches where the tokenizer has a ``tokenizers`` backend that decodes the same);
* every added token next to itself and to a few other ids;
* short slices of the ids of a multilingual text (split characters, byte runs);
* a deterministic sample of short sequences that mix the ids most likely to disagree: added and
  special ids, ids that decode to nothing or to U+FFFD (bytes, partial characters), ids whose text
  starts or ends with a space, punctuation that cleanup rewrites, repeated ids, and ids drawn from
  the whole vocabulary.

For each sequence the streamed text must equal the decode, and the text emitted after every prefix
must be a prefix of it. The first disagreement is reported with its ids; the caller then falls back.
The sample is fixed (a seeded generator) so that a codec is the same on every build.

Where the check decodes through a faster path than ``tokenizer.decode`` (the ``tokenizers``
backend, plus the space cleanup the model assumes decode applies), that path is first held to
``decode`` itself: on a part of the sample, and on every id whose text cleanup rewrites, alone and
twice in a row (whether decode cleans up is not the same in every ``transformers`` release). A
disagreement there says the fast path is not the decode: the caller must not use it at all.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, cast

import attrs

from puredetok._core.chain import Chain
from puredetok._core.decoders.base import finish_holds
from puredetok._build.lanes import texts_alone

Oracle = Callable[[Sequence[Sequence[int]]], list[str | None]]
"""Decodes a batch of id lists with the codec's options; None for a sequence the decode refuses."""

_SEED = 20241111
_RANDOM_SEQUENCES = 800
_REAL_DECODES = 200
_POOL = 64
_CLEANUP_WORDS = frozenset(
    {".", ",", "?", "!", "'", "n't", "'s", "'m", "'ve", "'re", "do", "not", "|", "<", ">"}
)
_CLEANUP_MARKS = frozenset({".", ",", "?", "!", "'", "n't", "'s", "'m", "'ve", "'re"})
"""What transformers' cleanup removes a space before."""
_MARK_PROBES = 128


@attrs.frozen
class Disagreement:
    """Where a model and the tokenizer's decode part ways (:func:`check_model`'s answer)."""

    text: str
    """The first disagreement, with its ids."""
    fast_path: bool
    """True if ``decode`` differs from the faster path the check decoded through (the backend):
    then nothing built on that path is the decode, the fallback included."""


def stream_text(decoding: Any, ids: Sequence[int]) -> tuple[list[str], str]:
    """The deltas of stepping ``ids`` through a fresh stream of ``decoding``, and its final flush."""
    hold = decoding.initial
    deltas = []
    for token_id in ids:
        hold, delta = decoding.step(hold, token_id)
        deltas.append(delta)
    return deltas, decoding.finish(hold)


def _stepped_alone(decoding: Any, ids: Iterable[int]) -> list[str]:
    """Each id's text alone, by a step from a fresh stream and the flush."""
    initial, step, finish = decoding.initial, decoding.step, decoding.finish
    texts = []
    for token_id in ids:
        hold, delta = step(initial, token_id)
        texts.append(delta + finish(hold))
    return texts


def _model_alone(decoding: Any, size: int) -> list[str]:
    """Each id's text alone, by the model: for a chain, every id through its stages at once
    (:mod:`puredetok._build.lanes`); otherwise a step from a fresh stream and the flush per id.
    """
    if not isinstance(decoding, Chain):
        return _stepped_alone(decoding, range(size))
    stages, initial = decoding.stages, decoding.initial[1:]
    if decoding.first_table is not None or initial != decoding.idle[1:]:
        table = decoding.first_table if decoding.first_table is not None else decoding.table
        return cast(list[str], texts_alone(stages, initial, table, flush=True))
    # A fresh stream starts from the steady holds: the fast table has the text of every id that
    # leaves them as they are, and the flush of those holds follows it.
    tail = finish_holds(stages, initial)
    texts = [text + tail if text is not None and tail else text for text in decoding.fast]
    missing = [token_id for token_id, text in enumerate(texts) if text is None]
    found = texts_alone(stages, initial, [decoding.table[i] for i in missing], flush=True)
    for token_id, text in zip(missing, found):
        texts[token_id] = text
    return cast(list[str], texts)


def _pools(alone: Sequence[str | None], added: Collection[int]) -> list[list[int]]:
    """Ids grouped by the ways they tend to break a model (each pool at most ``_POOL`` ids)."""
    empty, replacement, spaced, punctuation = [], [], [], []
    for token_id, text in enumerate(alone):
        if not text or (text.isalpha() and text not in _CLEANUP_WORDS):  # None: the decode refused
            if text == "":
                empty.append(token_id)
        elif "\ufffd" in text:
            replacement.append(token_id)
        elif text[0].isspace() or text[-1].isspace():
            spaced.append(token_id)
        elif text.strip() in _CLEANUP_WORDS or (len(text) == 1 and not text.isalpha()):
            punctuation.append(token_id)
    pools = [sorted(added), empty, replacement, spaced, punctuation]
    return [pool[:: max(1, len(pool) // _POOL)][:_POOL] for pool in pools if pool]


def sample_sequences(
    size: int, alone: Sequence[str | None], added: Collection[int], text_ids: Sequence[int]
) -> list[list[int]]:
    """The short sequences of the check (deterministic for a given vocabulary)."""
    rng = random.Random(_SEED)
    pools = _pools(alone, added)
    sequences: list[list[int]] = []
    neighbours = [rng.randrange(size) for _ in range(3)] + [pool[0] for pool in pools]
    for token_id in sorted(added)[:256]:
        sequences.append([token_id, token_id])
        for other in neighbours[:4]:
            sequences.append([other, token_id, other])
    for length in (2, 3, 5):
        for begin in range(0, max(0, len(text_ids) - length + 1)):
            sequences.append(list(text_ids[begin : begin + length]))

    def one() -> int:
        if pools and rng.random() < 0.6:
            return rng.choice(rng.choice(pools))
        return rng.randrange(size)

    for _ in range(_RANDOM_SEQUENCES):
        sequence = [one() for _ in range(rng.randrange(2, 7))]
        if rng.random() < 0.2:  # repeats: grouping decoders (CTC) and runs
            sequence.insert(rng.randrange(len(sequence)), sequence[rng.randrange(len(sequence))])
        sequences.append(sequence)
    return sequences


def _show(ids: Sequence[int], model: str, expected: str) -> str:
    return f"ids {list(ids)}: the model gives {model!r}, decode gives {expected!r}"


def _disagreement(decoding: Any, ids: Sequence[int], expected: str) -> str | None:
    deltas, rest = stream_text(decoding, ids)
    emitted = ""
    for delta in deltas:
        emitted += delta
        if not expected.startswith(emitted):
            return _show(ids, emitted + "...", expected) + " (text emitted before it was certain)"
    if emitted + rest != expected:
        return _show(ids, emitted + rest, expected)
    return None


def check_model(
    decoding: Any,
    size: int,
    *,
    singles: Oracle,
    sequences: Oracle,
    real: Oracle,
    added: Collection[int],
    text_ids: Sequence[int],
    exempt: Callable[[Sequence[int]], bool] = lambda ids: False,
) -> Disagreement | None:
    """None if the model agrees with the decode on the whole check; else the first disagreement.

    ``singles`` and ``sequences`` decode the one-id and the longer sequences (a faster path to
    the same decode where there is one); ``real`` is the tokenizer's own ``decode``, which must
    agree with them on a part of the sample (and decides alone where there is no faster path:
    then ``sequences`` is ``real``). Sequences for which
    ``exempt`` is true are where the model is documented to differ (a byte run longer than
    ``max_byte_run``) and are not compared.
    """
    expected_alone = singles(list(zip(range(size))))  # one-id tuples: lists would wake the collector
    batch = sample_sequences(size, expected_alone, added, text_ids)
    batch = [ids for ids in batch if not exempt(ids)]
    if real is not sequences:
        probes = [*mark_probes(enumerate(expected_alone)), *batch[:: max(1, len(batch) // _REAL_DECODES)]]
        problem = fast_path_disagreement(sequences, real, probes)
        if problem is not None:
            return problem
    model_alone = _model_alone(decoding, size)
    if model_alone != expected_alone:  # one C loop where they agree (or only a refused decode differs)
        for token_id, (mine, theirs) in enumerate(zip(model_alone, expected_alone)):
            if theirs is not None and mine != theirs:
                return Disagreement(_show([token_id], mine, theirs), False)
    for ids, expected in zip(batch, sequences(batch)):
        if expected is None:
            continue
        text = _disagreement(decoding, ids, expected)
        if text is not None:
            return Disagreement(text, False)
    return None


def mark_probes(alone: Iterable[tuple[int, str | None]]) -> list[list[int]]:
    """Each id (of ``(id, text alone)`` pairs) whose text is a mark that cleanup joins to the text
    before it (``" ."``, ``"'s"``), alone and twice in a row: whether a decode cleans up shows on
    them, whatever else its decoder does.
    """
    marks = [token_id for token_id, text in alone if text and text.strip() in _CLEANUP_MARKS]
    return [ids for token_id in marks[:_MARK_PROBES] for ids in ([token_id], [token_id, token_id])]


def fast_path_disagreement(
    fast: Oracle, real: Oracle, probes: Sequence[Sequence[int]]
) -> Disagreement | None:
    """None if a faster path to the decode (``fast``) gives what ``real``, the tokenizer's own
    ``decode``, gives on every sequence of ``probes``; else the first difference.
    """
    for ids, mine, own in zip(probes, fast(probes), real(probes)):
        if mine != own:
            return Disagreement(f"ids {list(ids)}: decode gives {own!r}, its backend {mine!r}", True)
    return None
