"""The exact text of a logged request, compared with the engine's, and what kind a difference is.

The exact text is contract C: the output's text after the prompt's, ``decode(p + s)`` after its
longest common prefix with ``decode(p)``. A codec that models the tokenizer exactly
(``codec.exact``) streams it in one pass; any other is checked with ``tokenizer.decode`` itself.
Engines do not decode the stop or EOS token that ended a request, and cut the text before the
stop string that ended it: the exact text is cut the same way, as the record says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs

from puredetok._build import reference_decode
from puredetok._core import Codec, continuation_text, feed, finish, start, step
from puredetok.serving._codec_cache import CodecCache, CodecOptions, ignores_spaces_option
from puredetok_audit._parsers import Joined, plain_join, rejoin
from puredetok_audit._records import NOT_PASSED, Request
from puredetok_audit.replay._incremental import common_prefix

KINDS = (
    "lost tail",
    "duplicated text",
    "replacement characters",
    "cleanup spacing",
    "stop trimming",
    "other",
)
"""The kinds of difference, as :func:`classify` names them."""

PARSER_SPLIT = "parser split"
"""The kind of a split chat response whose pieces cannot be joined again exactly, or whose
parser dropped a stretch of the exact text (see :func:`puredetok_audit._parsers.rejoin`):
reported, not counted as differing."""

DUPLICATE_LIMIT = 256
"""The longest repeated piece :func:`classify` looks for."""


@attrs.frozen
class AuditOptions:
    """The decode options an audit assumes where a record does not say."""

    skip_special_tokens: bool | None = None
    """None: the record's own, else True (the engines' default)."""
    clean_up_tokenization_spaces: bool | None = None
    """None: what the tokenizer's ``decode`` does by default."""
    include_stop_str_in_output: bool = False
    """The engine kept the stop string (and decoded the stop token) at the end of the text."""
    context: int = 20
    """Characters of each text shown on each side of a difference."""
    spaces_between_special_tokens: bool | None = None
    """None: the record's own, else True (vLLM's and SGLang's default)."""


DecodeKey = tuple[bool, bool | None]
"""``(skip_special_tokens, spaces_between_special_tokens)`` as passed to the decode (the second
None: not passed), which an :class:`Auditor` keeps a codec per."""


@attrs.frozen
class Difference:
    """A request whose engine text is not its exact text."""

    request: Request
    kind: str
    offset: int
    """The character offset of the first difference."""
    token: int
    """The index (in the output ids) of the token whose text holds the first difference."""
    exact: str
    """The exact text around the difference."""
    engine: str
    """The engine's text around the difference."""
    exact_length: int
    engine_length: int
    chunk: int | None = None
    """For a stream: the first chunk whose text a later one contradicts (it leaves the exact text)."""
    dropped: tuple[int, int] | None = None
    """For a split chat response: the offset and length of the exact text's stretch that the
    parser dropped (unchecked)."""
    looked: int | None = None
    """For a request compared as it streamed: the kinds ``cleanup spacing`` and ``duplicated
    text`` were looked for only in this many characters after the difference (the texts ran on
    further; see :data:`puredetok_audit._follow.SUFFIX_LIMIT`). None: in the whole texts."""


def _key(skip: bool | None, spaces: bool | Literal["not passed"] | None) -> DecodeKey:
    """The :data:`DecodeKey` of options as records and the audit's options give them (None: the
    engines' default, True).
    """
    passed = None if spaces == NOT_PASSED else True if spaces is None else spaces
    return (True if skip is None else skip, passed)


def duplicated(exact: str, engine: str, offset: int) -> bool:
    """The engine's text is the exact one with a piece repeated just before the difference."""
    extra = len(engine) - len(exact)
    if not 0 < extra <= DUPLICATE_LIMIT:
        return False
    for at in range(max(0, offset - extra), offset + 1):
        piece = engine[at : at + extra]
        repeated = engine[at - extra : at] == piece or engine[at + extra : at + 2 * extra] == piece
        if repeated and engine[:at] + engine[at + extra :] == exact:
            return True
    return False


@attrs.frozen
class Facts:
    """What :func:`decide` needs to name a difference: lengths and yes-or-no answers about the
    texts, which a comparison that keeps only windows of them can give (see
    :mod:`puredetok_audit._follow`) as well as one that has them whole.
    """

    exact_length: int
    engine_length: int
    offset: int
    """The length of the texts' common prefix."""
    stop: str | None
    stopped: bool
    """The record says a stop string or token ended the request."""
    untrimmed_starts: bool
    """The exact text of every id, before any stop trimming, begins with the engine's text."""
    engine_ends_with_stop: bool
    exact_ends_with_stop: bool
    stop_in_untrimmed: bool
    near_fffd: bool
    """A U+FFFD in either text within 3 characters of the difference."""


def decide(facts: Facts, spacing: Callable[[], bool], repeated: Callable[[], bool]) -> str:
    """The kind of a difference (see :data:`KINDS`); ``spacing``: whether the texts are equal but
    for spaces, ``repeated``: whether the engine's is the exact one with a piece repeated (asked
    only when the kinds before them do not apply).
    """
    f, stop = facts, facts.stop
    stop_length = len(stop or "")
    engine_is_exact_and_stop = f.engine_ends_with_stop and (
        f.engine_length == f.exact_length + stop_length and f.offset == f.exact_length
    )
    exact_is_engine_and_stop = f.exact_ends_with_stop and (
        f.exact_length == f.engine_length + stop_length and f.offset == f.engine_length
    )
    if f.stopped and (
        (f.engine_length > f.exact_length and f.untrimmed_starts)
        or (stop is not None and (engine_is_exact_and_stop or exact_is_engine_and_stop))
        or (stop is not None and not f.stop_in_untrimmed)
    ):
        return "stop trimming"
    if f.offset == f.engine_length:
        return "lost tail"
    if f.near_fffd:
        return "replacement characters"
    if spacing():
        return "cleanup spacing"
    if repeated():
        return "duplicated text"
    return "other"


def near_fffd(exact: str, engine: str, offset: int) -> bool:
    """A U+FFFD in either text within 3 characters of ``offset``."""
    near = slice(max(0, offset - 3), offset + 4)
    return "\ufffd" in engine[near] or "\ufffd" in exact[near]


def classify(exact: str, engine: str, untrimmed: str, stop: str | None, stopped: bool) -> str:
    """The kind of a difference between two whole texts (see :data:`KINDS`). ``untrimmed`` is the
    exact text of every id before any stop trimming; ``stop`` the stop string and ``stopped``
    whether the record says a stop string or token ended the request.
    """
    offset = common_prefix(exact, engine)
    facts = Facts(
        len(exact),
        len(engine),
        offset,
        stop,
        stopped,
        untrimmed.startswith(engine),
        stop is not None and engine.endswith(stop),
        stop is not None and exact.endswith(stop),
        stop is not None and stop in untrimmed,
        near_fffd(exact, engine, offset),
    )
    return decide(
        facts,
        lambda: engine.replace(" ", "") == exact.replace(" ", ""),
        lambda: duplicated(exact, engine, offset),
    )


@attrs.frozen
class Deferred:
    """A tokenizer not loaded yet, for an :class:`Auditor` given its codecs already built (an
    audit's worker, see :mod:`puredetok_audit._distributed`): ``load()`` is called the first time
    the tokenizer itself is needed (a codec not given, a codec that does not model the tokenizer
    exactly, a trace to replay), and never if it is not.
    """

    load: Callable[[], Any]


class Auditor:
    """Checks requests against one tokenizer (its codecs are built once per decode options).

    ``codecs`` are codecs already built for these options, by :data:`DecodeKey` (see
    :attr:`codecs`); ``tokenizer`` may be :class:`Deferred`.
    """

    def __init__(
        self,
        tokenizer: Any,
        options: AuditOptions = AuditOptions(),
        codecs: Mapping[DecodeKey, Codec] | None = None,
    ) -> None:
        self._tokenizer = tokenizer
        self.options = options
        self._codecs: dict[DecodeKey, Codec] = dict(codecs or {})
        self._decoders: dict[DecodeKey, Callable[[list[int]], str]] = {}
        self.replay_codecs = CodecCache()
        """The codecs it builds, and those of the managers that replay traces: each built once,
        not once per file nor once for the audit and again for the replay."""

    @property
    def tokenizer(self) -> Any:
        """The tokenizer (a :class:`Deferred` one is loaded now)."""
        if isinstance(self._tokenizer, Deferred):
            self._tokenizer = self._tokenizer.load()
        return self._tokenizer

    @property
    def codecs(self) -> dict[DecodeKey, Codec]:
        """The codecs built so far, by :data:`DecodeKey`."""
        return dict(self._codecs)

    def _decode_key(self, request: Request) -> DecodeKey:
        """The decode options of a request: the audit's, else the record's, else the engines'."""
        skip, spaces = self.options.skip_special_tokens, self.options.spaces_between_special_tokens
        return _key(
            request.skip_special_tokens if skip is None else skip,
            request.spaces_between_special_tokens if spaces is None else spaces,
        )

    def codec(self, request: Request) -> Codec:
        """The codec of a request's decode options."""
        return self._codec(self._decode_key(request))

    def codec_of(
        self,
        skip_special_tokens: bool | None,
        spaces_between_special_tokens: bool | Literal["not passed"] | None = None,
    ) -> Codec:
        """The codec of these decode options (None: the engines' default, True;
        :data:`~puredetok_audit._records.NOT_PASSED`: the option is not passed to the decode).
        """
        return self._codec(_key(skip_special_tokens, spaces_between_special_tokens))

    def _codec(self, key: DecodeKey) -> Codec:
        codec = self._codecs.get(key)
        if codec is None:
            skip, spaces = key
            options = CodecOptions(skip, self.options.clean_up_tokenization_spaces, spaces)
            codec = self.replay_codecs.codec(self.tokenizer, options)
            # where the decode ignores the option, so that a worker given these codecs needs no tokenizer
            alike = (True, False, None) if ignores_spaces_option(self.tokenizer) else (spaces,)
            self._codecs.update(((skip, each), codec) for each in alike)
        return codec

    def include_stop(self, request: Request) -> bool:
        """Whether the engine kept the stop string or token of a request (the record's word first)."""
        if request.include_stop is not None:
            return request.include_stop
        return self.options.include_stop_str_in_output

    def decoded_ids(self, request: Request) -> tuple[int, ...]:
        """The output ids whose text the engine returns (a stop token's is not, unless kept)."""
        if request.stop_token and request.output_ids and not self.include_stop(request):
            return request.output_ids[:-1]
        return request.output_ids

    def text_of(
        self,
        codec: Codec,
        prompt: tuple[int, ...],
        ids: tuple[int, ...],
        spaces_between_special_tokens: bool | None = True,
    ) -> str:
        """Contract C's text of ``ids`` after ``prompt``; where ``codec`` is not exact, the
        reference decode's, given ``spaces_between_special_tokens`` (None: not given).
        Raises ValueError for an id the tokenizer does not have.
        """
        spaces = spaces_between_special_tokens
        if codec.exact:
            state, text = feed(start(codec, prompt), ids)
            return text + finish(state)
        start(codec, prompt + ids)  # the same check of every id as the exact path
        key = (codec.skip_special_tokens, spaces)
        decode = self._decoders.get(key)
        if decode is None:
            decode = self._decoders[key] = reference_decode(
                self.tokenizer,
                skip_special_tokens=key[0],
                clean_up_tokenization_spaces=self.options.clean_up_tokenization_spaces,
                spaces_between_special_tokens=spaces,
            )
        return continuation_text(decode(list(prompt)), decode(list(prompt + ids)))

    def exact(self, request: Request) -> tuple[str, str]:
        """The exact text of a request, and the exact text of all its ids before stop trimming."""
        key = self._decode_key(request)
        codec, spaces, prompt = self._codec(key), key[1], request.prompt_ids
        untrimmed = self.text_of(codec, prompt, request.output_ids, spaces)
        ids = self.decoded_ids(request)
        text = untrimmed if ids == request.output_ids else self.text_of(codec, prompt, ids, spaces)
        if request.stop:
            at = text.find(request.stop)
            if at >= 0:
                text = text[: at + (len(request.stop) if self.include_stop(request) else 0)]
        return text, untrimmed

    def check(self, request: Request) -> Difference | None:
        """None if the engine's text is the exact text, else where and how they differ.

        Raises ValueError for an id the tokenizer does not have.
        """
        difference = self._check(request)
        if difference is None or not request.either or request.chunks is None:
            return difference
        chunks = request.chunks
        cumulative = not request.cumulative
        text = (chunks[-1].text if chunks else "") if cumulative else "".join(c.text for c in chunks)
        other = attrs.evolve(request, text=text, cumulative=cumulative, either=False)
        return difference if self._check(other) is not None else None

    def _check(self, request: Request) -> Difference | None:
        text, untrimmed = self.exact(request)
        engine: str | None = request.text
        joined: Joined | None = None
        if request.parts is not None:
            joined = rejoin(text, request.parts)
            engine = None if joined is None else joined.text
            chunk = self._split_contradicted(request, text, joined)
        else:
            chunk = self._contradicted(request, text)
        dropped = None if joined is None else joined.dropped
        if engine == text and chunk is None and dropped is None:
            return None
        stopped = request.stop is not None or request.stop_token
        if engine == text and chunk is not None and request.chunks is not None:
            engine = request.chunks[chunk].text  # a cumulative chunk that a later one took back
        if engine is None:
            engine = plain_join(request.parts or ())
            kind = PARSER_SPLIT
            offset = common_prefix(text, engine)
        elif engine == text and dropped is not None:
            offset, length = dropped
            engine = text[:offset] + text[offset + length :]  # as the parser returned it
            kind = PARSER_SPLIT
        else:
            offset = common_prefix(text, engine)
            kind = classify(text, engine, untrimmed, request.stop, stopped)
        around = self.options.context
        window = slice(max(0, offset - around), offset + around)
        return Difference(
            request,
            kind,
            offset,
            self._token_at(request, offset),
            text[window],
            engine[window],
            len(text),
            len(engine),
            chunk,
            dropped,
        )

    def _split_contradicted(self, request: Request, text: str, joined: Joined | None) -> int | None:
        """A split stream's first chunk with a piece that is not the exact text where it was
        joined (None for a whole response, or pieces that cannot be joined).
        """
        if request.chunks is None or joined is None:
            return None
        part = 0
        for index, chunk in enumerate(request.chunks):
            for kind, piece in chunk.parts or ():
                at = joined.offsets[part]
                part += 1
                if kind != "tool" and piece and not text.startswith(piece, at):
                    return index
        return None

    def _contradicted(self, request: Request, text: str) -> int | None:
        if request.chunks is None:
            return None
        if request.cumulative:
            return next((i for i, c in enumerate(request.chunks) if not text.startswith(c.text)), None)
        sent = 0
        for index, chunk in enumerate(request.chunks):
            if not text.startswith(chunk.text, sent):
                return index
            sent += len(chunk.text)
        return None

    def _token_at(self, request: Request, offset: int) -> int:
        """The index of the output token whose step made the character at ``offset`` certain."""
        ids = self.decoded_ids(request)
        state, emitted = start(self.codec(request), request.prompt_ids), 0
        for index, token in enumerate(ids):
            state, delta = step(state, token)
            emitted += len(delta)
            if emitted > offset:
                return index
        return max(len(ids) - 1, 0)
