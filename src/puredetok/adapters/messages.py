"""The messages the worker exchanges with the API server (frontend) and the scheduler (backend).

Every message is a frozen ``attrs`` record whose type annotations are its wire schema (``msgspec``
encodes and checks ``attrs`` classes). Each class has a ``KIND`` tag; a frame on the wire holds a
batch of messages of one kind (see :mod:`puredetok.adapters.wire`). The two kinds that flow per
token travel column by column, so that a frame of a thousand messages is a handful of arrays and
the worker never builds a record per message: :class:`DetokenizeBatch` (many requests' next ids)
and :class:`ReplyBatch` (their new text); ``.items`` turns either into its message records, and
``.of(messages)`` builds one from them. Other kinds travel as a :class:`Batch` of records.

Into a worker: :class:`TokenizeMsg`, :class:`DetokenizeMsg`, :class:`AbortMsg`, :class:`HealthCheckMsg`.
Out to the backend: :class:`UserMsg`, :class:`AbortBackendMsg`.
Out to the frontend: :class:`UserReply`, :class:`HealthReply`, :class:`ReadyMsg`.
"""

from __future__ import annotations

__all__ = [
    "Uid",
    "SamplingParams",
    "DEFAULT_PARAMS",
    "Opening",
    "TokenizeMsg",
    "DetokenizeMsg",
    "AbortMsg",
    "HealthCheckMsg",
    "UserMsg",
    "UserReply",
    "AbortBackendMsg",
    "HealthReply",
    "ReadyMsg",
    "Message",
    "Batch",
    "DetokenizeBatch",
    "ReplyBatch",
    "AnyBatch",
    "COLUMNS",
    "Ended",
    "Failed",
    "INBOUND",
    "TO_BACKEND",
    "TO_FRONTEND",
    "KINDS",
]

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Literal, TypeAlias

import attrs

Uid = int | str
"""A request id: an int or a string, unique per request for the lifetime of a worker."""


@attrs.frozen
class SamplingParams:
    """What a request asks of generation and of its text.

    The detokenizer uses the stop rules and the decode options; ``extra`` carries everything else
    (temperature, top_p, seed, ...) untouched to the scheduler.
    """

    max_new_tokens: int | None = None
    """Finish with reason ``"length"`` after this many generated tokens (None: no limit)."""
    min_tokens: int = 0
    """No stop string, stop token or EOS ends the request before this many tokens."""
    stop: tuple[str, ...] = ()
    """Stop strings: the text ends where the earliest one completes."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end the request (besides the tokenizer's EOS ids)."""
    ignore_eos: bool = False
    """Keep going past the tokenizer's EOS ids."""
    include_stop_str_in_output: bool = False
    """Emit the matched stop string at the end of the text."""
    skip_special_tokens: bool = False
    """Drop special tokens from the text, as ``decode(..., skip_special_tokens=True)`` does."""
    clean_up_tokenization_spaces: bool | None = None
    """transformers' space cleanup; None means what the tokenizer's ``decode`` does by default."""
    max_byte_run: int | None = None
    """The cap on a held byte-fallback run (``codec_for(..., max_byte_run=...)``): None for the
    manager's setting (no cap unless the manager or ``serve --max-byte-run`` sets one), 0 for no
    cap whatever the manager's setting, N >= 1 to hold at most N byte tokens of a still-valid run
    (exact unless a valid run longer than N later turns invalid)."""
    out_of_vocab: Literal["raise", "ignore"] | None = None
    """What an id past the vocabulary does (``codec_for(..., out_of_vocab=...)``): None for the
    manager's setting (``"raise"`` unless the manager or ``serve --out-of-vocab`` sets
    ``"ignore"``), ``"raise"`` (the id is skipped and named in the reply's error), ``"ignore"``
    (it decodes to nothing, exactly as ``tokenizer.decode`` skips it)."""
    extra: dict[str, Any] = attrs.field(factory=dict)
    """Other sampling parameters, passed through to the scheduler as they are."""


DEFAULT_PARAMS = SamplingParams()
"""The parameters of a request that gives none."""


@attrs.frozen
class Opening:
    """How a request's detokenizer state starts: its prompt ids and its parameters."""

    prompt_ids: tuple[int, ...] = ()
    """The prompt: the text continues it, and no prompt text is ever emitted."""
    params: SamplingParams = SamplingParams()
    """Stop rules and decode options for this request."""


@attrs.frozen
class TokenizeMsg:
    """Frontend -> worker: tokenize one request, given as plain ``text`` or as chat ``messages``.

    Chat messages (``[{"role": ..., "content": ...}, ...]``) go through the tokenizer's own chat
    template with the generation prompt added; ``template_options`` are passed to the template
    (for example ``{"enable_thinking": False}`` for Qwen3).
    """

    KIND: ClassVar[str] = "tokenize"
    uid: Uid
    text: str | None = None
    """Plain text (exactly one of ``text`` and ``messages``)."""
    messages: tuple[Any, ...] | None = None
    """Chat messages, checked per request (a malformed list is an error for this request only)."""
    params: SamplingParams = SamplingParams()
    """Passed on to the scheduler in the :class:`UserMsg`."""
    template_options: dict[str, Any] = attrs.field(factory=dict)
    """Extra variables for the chat template."""
    add_special_tokens: bool = True
    """For plain text: let the tokenizer add its BOS/EOS (chat templates add their own)."""


@attrs.frozen
class DetokenizeMsg:
    """Backend -> worker: the next generated token ids of one request (one or several).

    The first message of a request may carry an :class:`Opening` (prompt ids, stop rules, decode
    options); without one, the request starts with default options on first sight of its uid.
    ``finished`` says the scheduler has ended the request: the held-back text is flushed.
    """

    KIND: ClassVar[str] = "detokenize"
    uid: Uid
    token_ids: tuple[int, ...] = ()
    finished: bool = False
    open: Opening | None = None


@attrs.frozen
class AbortMsg:
    """Frontend -> worker: the client is gone; drop the request here and at the scheduler."""

    KIND: ClassVar[str] = "abort"
    uid: Uid


@attrs.frozen
class HealthCheckMsg:
    """Anyone -> worker: a probe answered with a :class:`HealthReply` through the same loop as work."""

    KIND: ClassVar[str] = "health"
    probe: int = 0


@attrs.frozen
class UserMsg:
    """Worker -> backend: a tokenized request, ready to schedule."""

    KIND: ClassVar[str] = "user"
    uid: Uid
    input_ids: tuple[int, ...]
    params: SamplingParams = SamplingParams()


@attrs.frozen
class UserReply:
    """Worker -> frontend: new text of one request, and whether and why it ended.

    ``error`` is set when this request could not be handled (the rest of its batch is unaffected).
    """

    KIND: ClassVar[str] = "reply"
    uid: Uid
    incremental_output: str = ""
    finished: bool = False
    finish_reason: str | None = None
    """``"stop"``, ``"length"`` or ``"abort"`` once finished; None while running or on error."""
    matched_stop: str | int | None = None
    """The stop string or token id that ended the request (``finish_reason == "stop"``)."""
    error: str | None = None

    def __attrs_post_init__(self) -> None:
        if not self.finished and (self.finish_reason is not None or self.matched_stop is not None):
            raise ValueError("a reply that has not finished has no finish_reason nor matched_stop")


@attrs.frozen
class AbortBackendMsg:
    """Worker -> backend: stop generating for this request (the client aborted, or a stop rule
    ended it on the worker's side).
    """

    KIND: ClassVar[str] = "abort_backend"
    uid: Uid


@attrs.frozen
class HealthReply:
    """Worker -> frontend: the answer to a :class:`HealthCheckMsg`."""

    KIND: ClassVar[str] = "health_reply"
    probe: int
    worker: str
    pid: int
    live_requests: int
    messages_handled: dict[str, int] = attrs.field(factory=dict)
    """Messages handled since start, by kind."""
    frames_dropped: dict[str, int] = attrs.field(factory=dict)
    """Frames or messages dropped since start, by reason."""


@attrs.frozen
class ReadyMsg:
    """Worker -> frontend: sent once, when the worker is listening and its tokenizer is loaded."""

    KIND: ClassVar[str] = "ready"
    worker: str
    pid: int
    address: str


Message = (
    TokenizeMsg
    | DetokenizeMsg
    | AbortMsg
    | HealthCheckMsg
    | UserMsg
    | UserReply
    | AbortBackendMsg
    | HealthReply
    | ReadyMsg
)
"""Any message."""

INBOUND: tuple[type[Message], ...] = (TokenizeMsg, DetokenizeMsg, AbortMsg, HealthCheckMsg)
"""What a worker accepts."""
TO_BACKEND: tuple[type[Message], ...] = (UserMsg, AbortBackendMsg)
"""What a worker sends to the scheduler."""
TO_FRONTEND: tuple[type[Message], ...] = (UserReply, HealthReply, ReadyMsg)
"""What a worker sends to the API server."""
KINDS: dict[str, type[Message]] = {cls.KIND: cls for cls in INBOUND + TO_BACKEND + TO_FRONTEND}
"""Every message class by its kind tag."""


@attrs.frozen
class Batch:
    """Messages of one kind, as records: a frame on the wire (``[kind, [message, ...]]``)."""

    kind: str
    items: tuple[Message, ...]

    def __len__(self) -> int:
        return len(self.items)


Ended: TypeAlias = tuple[int, str | None, str | int | None]
"""In a :class:`ReplyBatch`: ``(position, finish_reason, matched_stop)`` of a request that ended."""
Failed: TypeAlias = tuple[int, str]
"""In a :class:`ReplyBatch`: ``(position, error)`` of a message that could not be handled."""


def _positions(name: str, positions: Iterable[int], size: int) -> None:
    for position in positions:
        if not 0 <= position < size:
            raise ValueError(f"{name} names position {position} of a batch of {size} messages")


@attrs.frozen
class DetokenizeBatch:
    """Backend -> worker: :class:`DetokenizeMsg` messages of many requests, column by column.

    Message ``n`` is request ``uids[n]``; its ids are the next ``counts[n]`` of ``token_ids`` (one
    each when ``counts`` is None, the usual decode step); it ends its request when ``n`` is in
    ``finished``, and opens it with the :class:`Opening` paired with ``n`` in ``opens``.
    """

    KIND: ClassVar[str] = "detokenize"
    uids: tuple[Uid, ...]
    token_ids: tuple[int, ...]
    counts: tuple[int, ...] | None = None
    finished: tuple[int, ...] = ()
    opens: tuple[tuple[int, Opening], ...] = ()

    def __attrs_post_init__(self) -> None:
        size = len(self.uids)
        if self.counts is None:
            if len(self.token_ids) != size:
                raise ValueError(f"{size} uids but {len(self.token_ids)} token ids (one each without counts)")
        elif (
            len(self.counts) != size
            or sum(self.counts) != len(self.token_ids)
            or min(self.counts, default=0) < 0
        ):
            raise ValueError("counts must give each message's number of ids, adding up to len(token_ids)")
        _positions("finished", self.finished, size)
        _positions("opens", (position for position, _ in self.opens), size)
        if len({position for position, _ in self.opens}) != len(self.opens):
            raise ValueError("opens names a position twice")

    @property
    def kind(self) -> str:
        """``"detokenize"``."""
        return self.KIND

    def __len__(self) -> int:
        return len(self.uids)

    @property
    def items(self) -> tuple[DetokenizeMsg, ...]:
        """The messages, as records."""
        finished, opens = frozenset(self.finished), dict(self.opens)
        counts = self.counts if self.counts is not None else (1,) * len(self.uids)
        messages, cursor = [], 0
        for position, (uid, count) in enumerate(zip(self.uids, counts)):
            ids = self.token_ids[cursor : cursor + count]
            cursor += count
            messages.append(DetokenizeMsg(uid, ids, position in finished, opens.get(position)))
        return tuple(messages)

    @classmethod
    def of(cls, messages: Sequence[DetokenizeMsg]) -> DetokenizeBatch:
        """The batch of these messages."""
        counts = tuple(len(message.token_ids) for message in messages)
        return cls(
            tuple(message.uid for message in messages),
            tuple(token_id for message in messages for token_id in message.token_ids),
            None if all(count == 1 for count in counts) else counts,
            tuple(position for position, message in enumerate(messages) if message.finished),
            tuple((position, m.open) for position, m in enumerate(messages) if m.open is not None),
        )


@attrs.frozen
class ReplyBatch:
    """Worker -> frontend: :class:`UserReply` messages, column by column.

    Reply ``n`` is request ``uids[n]``, with new text ``outputs[n]``; ``ended`` lists the replies
    whose request has finished, with the reason and the matched stop, and ``errors`` those with an
    error (see :class:`UserReply`).
    """

    KIND: ClassVar[str] = "reply"
    uids: tuple[Uid, ...]
    outputs: tuple[str, ...]
    ended: tuple[Ended, ...] = ()
    errors: tuple[Failed, ...] = ()

    def __attrs_post_init__(self) -> None:
        size = len(self.uids)
        if len(self.outputs) != size:
            raise ValueError(f"{size} uids but {len(self.outputs)} outputs")
        _positions("ended", (position for position, _, _ in self.ended), size)
        _positions("errors", (position for position, _ in self.errors), size)

    @property
    def kind(self) -> str:
        """``"reply"``."""
        return self.KIND

    def __len__(self) -> int:
        return len(self.uids)

    @property
    def items(self) -> tuple[UserReply, ...]:
        """The replies, as records."""
        ended = {position: (reason, matched) for position, reason, matched in self.ended}
        errors = dict(self.errors)
        replies = []
        for position, (uid, output) in enumerate(zip(self.uids, self.outputs)):
            end = ended.get(position)
            error = errors.get(position)
            if end is None:
                replies.append(UserReply(uid, output, error=error))
            else:
                replies.append(UserReply(uid, output, True, end[0], end[1], error))
        return tuple(replies)

    @classmethod
    def of(cls, replies: Sequence[UserReply]) -> ReplyBatch:
        """The batch of these replies."""
        return cls(
            tuple(reply.uid for reply in replies),
            tuple(reply.incremental_output for reply in replies),
            tuple((n, r.finish_reason, r.matched_stop) for n, r in enumerate(replies) if r.finished),
            tuple((n, r.error) for n, r in enumerate(replies) if r.error is not None),
        )

    @classmethod
    def join(cls, batches: Sequence[ReplyBatch]) -> ReplyBatch:
        """One batch holding these, in order."""
        if len(batches) == 1:
            return batches[0]
        uids: list[Uid] = []
        outputs: list[str] = []
        ended: list[Ended] = []
        errors: list[Failed] = []
        for batch in batches:
            offset = len(uids)
            uids += batch.uids
            outputs += batch.outputs
            ended += [(offset + position, reason, matched) for position, reason, matched in batch.ended]
            errors += [(offset + position, error) for position, error in batch.errors]
        return cls(tuple(uids), tuple(outputs), tuple(ended), tuple(errors))


AnyBatch: TypeAlias = Batch | DetokenizeBatch | ReplyBatch
"""What a frame holds: ``.kind``, ``len()`` and ``.items`` (the message records) on each."""

COLUMNS: dict[str, type[DetokenizeBatch] | type[ReplyBatch]] = {
    DetokenizeBatch.KIND: DetokenizeBatch,
    ReplyBatch.KIND: ReplyBatch,
}
"""The kinds that travel column by column, and their batch classes."""
