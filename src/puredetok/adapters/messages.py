"""The messages the worker exchanges with the API server (frontend) and the scheduler (backend).

Every message is a frozen, typed record (a ``msgspec.Struct``: the wire schema and the Python
object are one thing, and decoding one costs about a tenth of building an ``attrs`` record, which
matters at hundreds of thousands of messages per second). Each class has a ``KIND`` tag; a frame on
the wire is a :class:`Batch` of messages of one kind (see :mod:`puredetok.adapters.wire`).

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
    "INBOUND",
    "TO_BACKEND",
    "TO_FRONTEND",
    "KINDS",
]

from typing import Any, ClassVar

import attrs
import msgspec

Uid = int | str
"""A request id: an int or a string, unique per request for the lifetime of a worker."""


class _Record(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """Common base: frozen, and fields left at their default are left off the wire."""

    KIND: ClassVar[str] = ""


class SamplingParams(_Record, frozen=True):
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
    extra: dict[str, Any] = {}
    """Other sampling parameters, passed through to the scheduler as they are."""


DEFAULT_PARAMS = SamplingParams()
"""The parameters of a request that gives none."""


class Opening(_Record, frozen=True):
    """How a request's detokenizer state starts: its prompt ids and its parameters."""

    prompt_ids: tuple[int, ...] = ()
    """The prompt: the text continues it, and no prompt text is ever emitted."""
    params: SamplingParams = SamplingParams()
    """Stop rules and decode options for this request."""


class TokenizeMsg(_Record, frozen=True):
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
    template_options: dict[str, Any] = {}
    """Extra variables for the chat template."""
    add_special_tokens: bool = True
    """For plain text: let the tokenizer add its BOS/EOS (chat templates add their own)."""


class DetokenizeMsg(_Record, frozen=True):
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


class AbortMsg(_Record, frozen=True):
    """Frontend -> worker: the client is gone; drop the request here and at the scheduler."""

    KIND: ClassVar[str] = "abort"
    uid: Uid


class HealthCheckMsg(_Record, frozen=True):
    """Anyone -> worker: a probe answered with a :class:`HealthReply` through the same loop as work."""

    KIND: ClassVar[str] = "health"
    probe: int = 0


class UserMsg(_Record, frozen=True):
    """Worker -> backend: a tokenized request, ready to schedule."""

    KIND: ClassVar[str] = "user"
    uid: Uid
    input_ids: tuple[int, ...]
    params: SamplingParams = SamplingParams()


class UserReply(_Record, frozen=True):
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


class AbortBackendMsg(_Record, frozen=True):
    """Worker -> backend: stop generating for this request (the client aborted, or a stop rule
    ended it on the worker's side).
    """

    KIND: ClassVar[str] = "abort_backend"
    uid: Uid


class HealthReply(_Record, frozen=True):
    """Worker -> frontend: the answer to a :class:`HealthCheckMsg`."""

    KIND: ClassVar[str] = "health_reply"
    probe: int
    worker: str
    pid: int
    live_requests: int
    messages_handled: dict[str, int] = {}
    """Messages handled since start, by kind."""
    frames_dropped: dict[str, int] = {}
    """Frames or messages dropped since start, by reason."""


class ReadyMsg(_Record, frozen=True):
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
    """Messages of one kind: a frame on the wire (``[kind, [message, ...]]``)."""

    kind: str
    items: tuple[Message, ...]
