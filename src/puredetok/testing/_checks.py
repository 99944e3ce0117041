"""The checks: run a detokenizer over ids, compare with the tokenizer's own decode, report the first
guarantee it breaks; and a hypothesis search that shrinks a breaking sequence to a minimal one.

With a prompt, the text to compare with is contract C's: ``decode(prompt + ids)`` after the longest
prefix it shares with ``decode(prompt)``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Sequence
from typing import TypeAlias

import attrs
import hypothesis
from hypothesis import HealthCheck, find
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from puredetok._build import TokenizerLike, codec_for, reference_decode, resolved_cleanup
from puredetok._core import Codec, check_token, continuation_text, start, step
from puredetok.errors import OptionTypeError, PuredetokError
from puredetok.testing._detokenizers import ContinuingFactory, Detokenizer, DetokenizerFactory

REPLACEMENT = "\ufffd"


class Guarantee(enum.Enum):
    """A guarantee of docs/guarantees.md that the kit checks; the value is its code (``"G1"``...)."""

    EXACT = "G1"
    """The stream's whole text (deltas and final flush) equals ``decode(ids)``."""
    PREFIX_SAFE = "G2"
    """After every id, the text sent so far is a prefix of ``decode(ids so far)`` and of the decode
    of every longer sequence: nothing is retracted, duplicated or sent before it is certain."""
    EAGER = "G3"
    """After every id, at most ``max_lag`` characters of certain text are still unsent (opt-in:
    measured against puredetok's core, which sends exactly the certain text)."""
    NO_TRANSIENT_REPLACEMENT = "G4"
    """A sent U+FFFD is always one the final decode has at the same place."""
    CONTINUATION = "C"
    """After a prompt, the text sent adds up to ``decode(prompt + ids)`` after the longest prefix it
    shares with ``decode(prompt)``, and after every id it is a prefix of that text for the ids so
    far: what the prompt already showed is never sent again."""

    def __str__(self) -> str:
        return f"{self.value} {self.name.lower().replace('_', ' ')}"


STREAMING_GUARANTEES: frozenset[Guarantee] = frozenset(
    {Guarantee.EXACT, Guarantee.PREFIX_SAFE, Guarantee.NO_TRANSIENT_REPLACEMENT}
)
"""What every correct streaming detokenizer keeps (G1, G2, G4); the default of the checks."""

CONTINUATION_GUARANTEES: frozenset[Guarantee] = frozenset(
    {Guarantee.CONTINUATION, Guarantee.PREFIX_SAFE, Guarantee.NO_TRANSIENT_REPLACEMENT}
)
"""What every correct streaming detokenizer keeps after a prompt (C, G2, G4); the default of the
continuation checks."""


@attrs.frozen
class Violation:
    """The first guarantee a detokenizer broke on one id sequence, with the evidence."""

    guarantee: Guarantee
    ids: tuple[int, ...]
    """The whole sequence (after a search: a minimal one)."""
    position: int
    """How many ids the stream had taken when it broke (``len(ids)`` for a broken final flush)."""
    at_finish: bool
    """Whether the break shows only in the final flush."""
    emitted: str
    """The text the stream had sent at that point (with the flush, when ``at_finish``)."""
    expected: str
    """The reference text it was compared with."""
    detail: str
    """One line saying what went wrong."""
    prompt: tuple[int, ...] = ()
    """The prompt the stream continued (continuation checks); ``ids`` are the output's ids."""

    def __str__(self) -> str:
        where = "at the final flush" if self.at_finish else f"after {self.position} of {len(self.ids)} ids"
        prompt = f"  prompt:   {list(self.prompt)}\n" if self.prompt else ""
        return (
            f"{self.guarantee} broken {where}: {self.detail}\n"
            f"{prompt}"
            f"  ids:      {list(self.ids)}\n"
            f"  emitted:  {self.emitted!r}\n"
            f"  expected: {self.expected!r}"
        )


class ConformanceError(PuredetokError, AssertionError):
    """A detokenizer broke a guarantee; ``violation`` holds the (minimal) counterexample."""

    def __init__(self, violation: Violation) -> None:
        self.violation = violation
        super().__init__(str(violation))


@attrs.frozen
class Reference:
    """The oracle: the tokenizer's own decode with fixed options, and puredetok's codec for it."""

    decode: Callable[[list[int]], str] = attrs.field(repr=False)
    """``ids -> text``, exactly as the detokenizer under test should end up."""
    codec: Codec
    """puredetok's codec with the same options: the vocabulary size, and the certain text for G3."""

    @property
    def vocab_size(self) -> int:
        """Valid ids are ``0 <= id < vocab_size``."""
        return self.codec.vocab_size


def reference_for(
    tokenizer: TokenizerLike,
    *,
    skip_special_tokens: bool = False,
    clean_up_tokenization_spaces: bool | None = None,
    codec: Codec | None = None,
) -> Reference:
    """The oracle for a ``transformers`` tokenizer or a ``tokenizers.Tokenizer`` and decode options:
    the tokenizer's own decode as ``codec_for`` models it (with cleanup, a decode that has no such
    option gets ``transformers``' cleanup of its text), the text replay and the audit check against.

    ``codec`` reuses a codec of this tokenizer built with the same options (building one takes up
    to a second). A codec whose options differ is refused with a ``ValueError`` naming the option
    and both values: its ``skip_special_tokens``, or the cleanup it applies
    (``clean_up_tokenization_spaces=None`` is the tokenizer's default, compared as ``codec_for``
    resolves it); a ``codec`` that is not a :class:`~puredetok.Codec` is an
    :class:`~puredetok.errors.OptionTypeError`.
    """
    decode = reference_decode(
        tokenizer,
        skip_special_tokens=skip_special_tokens,
        clean_up_tokenization_spaces=clean_up_tokenization_spaces,
    )
    if codec is None:
        codec = codec_for(
            tokenizer,
            skip_special_tokens=skip_special_tokens,
            clean_up_tokenization_spaces=clean_up_tokenization_spaces,
        )
    else:
        _check_codec_options(tokenizer, codec, skip_special_tokens, clean_up_tokenization_spaces)
    return Reference(decode, codec)


def _check_codec_options(tokenizer: TokenizerLike, codec: object, skip: bool, cleanup: bool | None) -> None:
    """Refuse a ``codec`` given to :func:`reference_for` that is not one, or whose options are not
    these (the cleanup as the tokenizer resolves it).
    """
    if not isinstance(codec, Codec):
        raise OptionTypeError(
            f"codec must be a Codec (from codec_for) or None, not {type(codec).__name__} {codec!r:.60}"
        )
    if codec.skip_special_tokens != skip:
        raise ValueError(
            f"the codec was built with skip_special_tokens={codec.skip_special_tokens}, but "
            f"skip_special_tokens={skip} was asked for: {_SAME_OPTIONS}"
        )
    resolved = resolved_cleanup(tokenizer, cleanup)
    if codec.clean_up_tokenization_spaces != resolved:
        means = (
            ""
            if cleanup == resolved
            else f" (which this {type(tokenizer).__name__}'s decode takes as {resolved})"
        )
        raise ValueError(
            f"the codec applies clean_up_tokenization_spaces={codec.clean_up_tokenization_spaces}, but "
            f"clean_up_tokenization_spaces={cleanup}{means} was asked for: {_SAME_OPTIONS}"
        )


_SAME_OPTIONS = "pass a codec built with the same options, or none"


def _first_difference(a: str, b: str) -> int:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return min(len(a), len(b))


def _repeat_at(emitted: str, now: str, at: int) -> str:
    """The text sent twice at ``at``, if removing one copy makes ``emitted`` a prefix of ``now``."""
    for size in range(1, at + 1):
        copy = emitted[at : at + size]
        if (
            len(copy) == size
            and emitted[at - size : at] == copy
            and now.startswith(emitted[:at] + emitted[at + size :])
        ):
            return copy
    return ""


def _prefix_violation(
    emitted: str, now: str, full: str, position: int, total: int, shown: str = ""
) -> tuple[str, str] | None:
    """Why ``emitted`` is not a prefix of ``now`` (the text after ``position`` ids) or of ``full``
    (after all ``total``), and the text it was compared with (``now`` or ``full`` itself); None if it
    is a prefix of both. ``shown`` is the prompt's text, when there is a prompt.
    """
    if not now.startswith(emitted):
        at = _first_difference(emitted, now)
        repeated = _repeat_at(emitted, now, at)
        if repeated:
            why = f"duplicated {repeated!r} at character {at}"
        elif at == len(now):
            why = f"sent {len(emitted) - len(now)} more characters than decode(ids[:{position}]) has"
        else:
            why = f"character {at} is {emitted[at]!r} but decode(ids[:{position}]) has {now[at]!r} there"
        if shown and _repeats_prompt(emitted, now, shown):
            why = f"sent again text the prompt already showed ({why})"
        return why, now
    if not full.startswith(emitted):
        at = _first_difference(emitted, full)
        return (
            f"character {at} was sent as {emitted[at]!r} before it was certain: "
            f"the decode of all {total} ids has {full[at : at + 1]!r} there",
            full,
        )
    return None


def _stream_error(error: Exception, what: str) -> str:
    return f"{what} raised {type(error).__name__}: {error}"


def check_ids(
    detokenizer: DetokenizerFactory,
    reference: Reference,
    ids: Sequence[int],
    *,
    guarantees: Collection[Guarantee] = STREAMING_GUARANTEES,
    max_lag: int = 0,
) -> Violation | None:
    """Stream ``ids`` through a fresh stream of ``detokenizer``; the first guarantee broken, or None.

    Checks after every id, in this order: G4 (a new U+FFFD the final decode does not have there),
    G2 (the text sent is a prefix of ``decode(ids so far)`` and of ``decode(ids)``), G3 if asked
    (at most ``max_lag`` certain characters unsent); then G1 on the final flush. An exception from
    the stream counts as breaking G1. Raises ``ValueError`` for an id outside the vocabulary.
    """
    return _check(lambda _: detokenizer(), reference, None, ids, frozenset(guarantees), max_lag)


def check_continuation(
    detokenizer: ContinuingFactory,
    reference: Reference,
    prompt: Sequence[int],
    ids: Sequence[int],
    *,
    guarantees: Collection[Guarantee] = CONTINUATION_GUARANTEES,
    max_lag: int = 0,
) -> Violation | None:
    """Stream ``ids`` through a fresh stream of ``detokenizer`` opened after ``prompt``; the first
    guarantee broken, or None.

    The text it must send is contract C's: ``decode(prompt + ids)`` after the longest prefix it
    shares with ``decode(prompt)``. Checks after every id, in this order: G4 (a new U+FFFD that
    text does not have there), C (the text sent is a prefix of C's text for the ids so far: what
    the prompt showed is not sent again), G2 (and a prefix of C's text for all the ids: nothing
    sent early), G3 if asked; then C on the final flush. An exception from the stream counts as
    breaking C. Raises ``ValueError`` for an id outside the vocabulary.
    """
    return _check(detokenizer, reference, tuple(prompt), ids, frozenset(guarantees), max_lag)


def _check(
    opener: ContinuingFactory,
    reference: Reference,
    prompt: tuple[int, ...] | None,
    ids: Sequence[int],
    wanted: frozenset[Guarantee],
    max_lag: int,
) -> Violation | None:
    """:func:`check_ids` (``prompt`` None) or :func:`check_continuation`."""
    size = reference.vocab_size
    ids = tuple(check_token(token_id, size, index) for index, token_id in enumerate(ids))
    if Guarantee.EAGER in wanted and not reference.codec.exact:
        raise ValueError(f"G3 needs an exact codec; this one is not: {reference.codec.reason}")
    continuing = prompt is not None
    before = tuple(check_token(token_id, size, index) for index, token_id in enumerate(prompt or ()))
    exact = Guarantee.CONTINUATION if continuing else Guarantee.EXACT
    agrees = Guarantee.CONTINUATION if continuing else Guarantee.PREFIX_SAFE
    shown = reference.decode(list(before)) if continuing else ""

    def expected_after(count: int) -> str:
        return continuation_text(shown, reference.decode([*before, *ids[:count]]))

    full = expected_after(len(ids))
    certain_state, certain = start(reference.codec, before), ""
    emitted = ""

    def broken(guarantee: Guarantee, position: int, expected: str, detail: str) -> Violation:
        return Violation(guarantee, ids, position, False, emitted, expected, detail, before)

    try:
        stream: Detokenizer = opener(before)
    except Exception as error:
        return broken(exact, 0, full, _stream_error(error, "opening the stream"))
    for position, token_id in enumerate(ids, 1):
        try:
            delta: object = stream.step(token_id)
        except Exception as error:
            return broken(exact, position, full, _stream_error(error, f"step({token_id})"))
        if not isinstance(delta, str):
            return broken(exact, position, full, f"step returned a {type(delta).__name__}")
        sent_before, emitted = len(emitted), emitted + delta
        if Guarantee.NO_TRANSIENT_REPLACEMENT in wanted:
            for at in range(sent_before, len(emitted)):
                if emitted[at] == REPLACEMENT and full[at : at + 1] != REPLACEMENT:
                    there = f"has {full[at]!r}" if at < len(full) else f"ends after {len(full)} characters"
                    detail = f"sent U+FFFD as character {at}, where the final decode {there}"
                    return broken(Guarantee.NO_TRANSIENT_REPLACEMENT, position, full, detail)
        if agrees in wanted or Guarantee.PREFIX_SAFE in wanted:
            now = expected_after(position)
            problem = _prefix_violation(emitted, now, full, position, len(ids), shown)
            if problem is not None:
                guarantee = agrees if not now.startswith(emitted) else Guarantee.PREFIX_SAFE
                if guarantee in wanted:
                    return broken(guarantee, position, problem[1], problem[0])
        if Guarantee.EAGER in wanted:
            certain_state, more = step(certain_state, token_id)
            certain += more
            lag = len(certain) - len(emitted)
            # Only text that is right so far has a lag; wrong text is G2's business.
            if lag > max_lag and certain.startswith(emitted):
                detail = (
                    f"{lag} characters that no later id can change are still unsent "
                    f"({certain[len(emitted) :]!r}; at most {max_lag} allowed)"
                )
                return broken(Guarantee.EAGER, position, certain, detail)
    try:
        tail: object = stream.finish()
    except Exception as error:
        return broken(exact, len(ids), full, _stream_error(error, "finish()"))
    text = emitted + str(tail)
    if exact in wanted and text != full:
        if full.startswith(text):
            detail = f"the stream lost its last {len(full) - len(text)} characters {full[len(text) :]!r}"
        elif text.startswith(full):
            detail = f"the stream sent {len(text) - len(full)} characters too many {text[len(full) :]!r}"
        else:
            at = _first_difference(text, full)
            detail = f"the texts differ from character {at}: {text[at : at + 8]!r} vs {full[at : at + 8]!r}"
        if continuing and _repeats_prompt(text, full, shown):
            detail += "; it starts with text the prompt already showed"
        return Violation(exact, ids, len(ids), True, text, full, detail, before)
    return None


def _repeats_prompt(emitted: str, expected: str, shown: str) -> bool:
    """Whether ``emitted`` went wrong by sending again a tail of the prompt's text ``shown``."""
    at = _first_difference(emitted, expected)
    return any(
        shown.endswith(emitted[at:end]) and emitted[at:end] != expected[at:end]
        for end in range(at + 1, len(emitted) + 1)
    )


def _search_settings(given: hypothesis.settings | None) -> hypothesis.settings:
    if given is not None:
        return given
    # Derandomized and without a database: the same tokenizer and detokenizer always give the
    # same minimal counterexample, on any machine.
    return hypothesis.settings(
        hypothesis.settings(),
        database=None,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


def find_violation(
    detokenizer: DetokenizerFactory,
    reference: Reference,
    ids: st.SearchStrategy[list[int]],
    *,
    guarantees: Collection[Guarantee] = STREAMING_GUARANTEES,
    max_lag: int = 0,
    settings: hypothesis.settings | None = None,
) -> Violation | None:
    """Search id sequences drawn from ``ids`` for one that breaks a guarantee; the minimal one found.

    Hypothesis shrinks the first breaking sequence (fewest ids, then the simplest draws); then single
    ids are dropped while the same guarantee still breaks, so that no id of the result can be
    removed. The result is that sequence's first broken guarantee, as :func:`check_ids` reports it.
    ``settings`` defaults to the current hypothesis profile's ``max_examples``, derandomized and
    without a database, so a run is reproducible. Returns None when no example breaks one.
    Call it from a plain test, not from inside a ``@given`` test (use :func:`check_ids` there).
    """

    def check(prompt: Sequence[int], drawn: Sequence[int]) -> Violation | None:
        return check_ids(detokenizer, reference, drawn, guarantees=guarantees, max_lag=max_lag)

    pairs = ids.map(lambda drawn: (list[int](), drawn))
    return _search(check, pairs, settings)


def find_continuation_violation(
    detokenizer: ContinuingFactory,
    reference: Reference,
    prompts: st.SearchStrategy[list[int]],
    ids: st.SearchStrategy[list[int]],
    *,
    guarantees: Collection[Guarantee] = CONTINUATION_GUARANTEES,
    max_lag: int = 0,
    settings: hypothesis.settings | None = None,
) -> Violation | None:
    """:func:`find_violation` for streams after a prompt: searches prompts drawn from ``prompts``
    (:func:`puredetok.testing.strategies.prompt_ids` draws them as engines send them) and outputs
    drawn from ``ids``; the minimal breaking pair found, as :func:`check_continuation` reports it
    (no id of its prompt or of its output can be removed), or None.
    """

    def check(prompt: Sequence[int], drawn: Sequence[int]) -> Violation | None:
        return check_continuation(
            detokenizer, reference, prompt, drawn, guarantees=guarantees, max_lag=max_lag
        )

    return _search(check, st.tuples(prompts, ids), settings)


_Check: TypeAlias = Callable[[Sequence[int], Sequence[int]], Violation | None]
"""``(prompt, ids) -> violation``: one of the checks, with its options bound."""


def _search(
    check: _Check, pairs: st.SearchStrategy[tuple[list[int], list[int]]], settings: hypothesis.settings | None
) -> Violation | None:
    try:
        shrunk = find(pairs, lambda pair: check(*pair) is not None, settings=_search_settings(settings))
    except NoSuchExample:
        return None
    violation = check(*shrunk)
    if violation is None:
        raise RuntimeError(f"the detokenizer is not deterministic: {shrunk} broke a guarantee only once")
    return _without_needless_ids(violation, check)


def _without_needless_ids(violation: Violation, check: _Check) -> Violation:
    """Drop single ids (of the output, then of the prompt; last first) while the same guarantee
    still breaks: no id can then be removed.
    """
    prompt, ids, changed = list(violation.prompt), list(violation.ids), True
    while changed:
        changed = False
        for index in reversed(range(len(ids))):
            candidate = ids[:index] + ids[index + 1 :]
            found = check(prompt, candidate)
            if found is not None and found.guarantee is violation.guarantee:
                ids, violation, changed = candidate, found, True
        for index in reversed(range(len(prompt))):
            shorter = prompt[:index] + prompt[index + 1 :]
            found = check(shorter, ids)
            if found is not None and found.guarantee is violation.guarantee:
                prompt, violation, changed = shorter, found, True
    return violation


def assert_conforms(
    detokenizer: DetokenizerFactory,
    reference: Reference,
    ids: st.SearchStrategy[list[int]],
    *,
    guarantees: Collection[Guarantee] = STREAMING_GUARANTEES,
    max_lag: int = 0,
    settings: hypothesis.settings | None = None,
) -> None:
    """:func:`find_violation`, raising :class:`ConformanceError` (an ``AssertionError``) on a break."""
    violation = find_violation(
        detokenizer, reference, ids, guarantees=guarantees, max_lag=max_lag, settings=settings
    )
    if violation is not None:
        raise ConformanceError(violation)


def assert_continues(
    detokenizer: ContinuingFactory,
    reference: Reference,
    prompts: st.SearchStrategy[list[int]],
    ids: st.SearchStrategy[list[int]],
    *,
    guarantees: Collection[Guarantee] = CONTINUATION_GUARANTEES,
    max_lag: int = 0,
    settings: hypothesis.settings | None = None,
) -> None:
    """:func:`find_continuation_violation`, raising :class:`ConformanceError` on a break."""
    violation = find_continuation_violation(
        detokenizer, reference, prompts, ids, guarantees=guarantees, max_lag=max_lag, settings=settings
    )
    if violation is not None:
        raise ConformanceError(violation)
