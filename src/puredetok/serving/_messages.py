"""The messages the worker exchanges with the API server (frontend) and the scheduler (backend).

Every message is a frozen ``msgspec.Struct`` whose type annotations are its wire schema, value
constraints included (``Annotated[int, Meta(ge=1)]``): decoding checks them, and so does
construction (``check``, msgspec's ``convert`` against the same annotations, run by each record's
``__post_init__``), so a record that exists is valid, wherever it was made. Sequence fields take
lists and store tuples (records are values). Each
class has a ``KIND`` tag; a frame on the wire is ``[kind, version, batch]``: a batch of messages of
one kind, tagged with :data:`PROTOCOL_VERSION` (see :mod:`puredetok.worker._wire`). The two kinds
that flow per token travel column by column, so that a frame of a thousand messages is a handful of
arrays and the worker never builds a record per message: :class:`DetokenizeBatch` (many requests'
next ids) and :class:`ReplyBatch` (their new text); ``.items`` turns either into its message
records, and ``.of(messages)`` builds one from them. Other kinds travel as a :class:`Batch` of
records.

Into a worker: :class:`TokenizeMsg`, :class:`DetokenizeMsg`, :class:`AbortMsg`, :class:`HealthCheckMsg`.
Out to the backend: :class:`UserMsg`, :class:`AbortBackendMsg`.
Out to the frontend: :class:`UserReply`, :class:`HealthReply`, :class:`ReadyMsg`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, compress
from types import UnionType
from typing import (
    Annotated,
    Any,
    ClassVar,
    Final,
    Literal,
    TypeAlias,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

import msgspec
from msgspec import Meta, Struct, field
from msgspec.structs import astuple

from puredetok._options import MAX_INT
from puredetok.errors import OptionTypeError

PROTOCOL_VERSION: Final = 2
"""The version of the wire protocol: every frame carries it (``[kind, version, batch]``) and the
:class:`ReadyMsg` says it; a frame of another version is refused, naming both versions. Version 1
was the ``[kind, batch]`` frame of attrs records; 2 is this one."""

Uid = int | str
"""A request id: an int or a string, unique per request for the lifetime of a worker."""


FinishKind: TypeAlias = Literal["stop", "length", "abort"]
"""Why a request ended: a stop string, stop token or EOS; its token limit; or an abort."""

TokenId: TypeAlias = Annotated[int, Meta(ge=0, le=MAX_INT)]
"""A token id (an int in ``[0, 2**63 - 1]``: every int a handed-back state holds)."""
StopString: TypeAlias = Annotated[str, Meta(min_length=1)]
"""A stop string (never empty)."""
Limit: TypeAlias = Annotated[int, Meta(ge=1, le=MAX_INT)]
"""A token limit (an int in ``[1, 2**63 - 1]``)."""
Count: TypeAlias = Annotated[int, Meta(ge=0, le=MAX_INT)]
"""A count (an int in ``[0, 2**63 - 1]``)."""


def _as_stored(hint: Any) -> Any:
    """The type a field's value is checked (and stored) as: each ``Sequence[X]`` in it as
    ``tuple[X, ...]`` (so that a list given for it is kept as a tuple).
    """
    origin = get_origin(hint)
    if origin is Sequence:
        return tuple[(_as_stored(get_args(hint)[0]), ...)]  # type: ignore[misc]
    if origin is Union or origin is UnionType:
        return Union[tuple(map(_as_stored, get_args(hint)))]  # noqa: UP007
    return hint


def _records_in(hint: Any) -> tuple[type, ...]:
    """The record classes a field holds (``Opening | None``: Opening and NoneType), if it holds records."""
    options = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
    if not any(isinstance(option, type) and issubclass(option, Struct) for option in options):
        return ()
    return tuple(option for option in options if isinstance(option, type))


_Schema: TypeAlias = tuple[type[Struct], tuple[str, ...], tuple[tuple[str, tuple[type, ...]], ...]]
_SCHEMAS: dict[type[Struct], _Schema] = {}


def _schema(cls: type[Struct]) -> _Schema:
    """What :func:`check` reads of ``cls``: its fields as msgspec checks them (an ``array_like``
    Struct of the same fields and annotations in the same order, each ``Sequence[X]`` as
    ``tuple[X, ...]``; built once, so that msgspec keeps what it learnt of the types), the names
    of its sequence fields, and its fields that hold records with their classes (those are
    ``Any`` in the Struct and checked by class: msgspec would build a record from a dict).
    """
    hints = get_type_hints(cls, include_extras=True)
    fields: list[tuple[str, Any]] = []
    sequences: list[str] = []
    records: list[tuple[str, tuple[type, ...]]] = []
    for name in cls.__struct_fields__:
        classes = _records_in(hints[name])
        stored = Any if classes else _as_stored(hints[name])
        fields.append((name, stored))
        if classes:
            records.append((name, classes))
        elif stored != hints[name]:
            sequences.append(name)
    checked = msgspec.defstruct(f"{cls.__name__}Fields", fields, array_like=True)
    return checked, tuple(sequences), tuple(records)


def check(record: Struct) -> None:
    """Check ``record``'s fields against their annotations, types and constraints, with
    ``msgspec.convert``, and store each sequence given as a list as a tuple. A value of the wrong
    type raises :class:`~puredetok.errors.OptionTypeError`, one out of its constraints a
    :class:`ValueError`, each naming the record and the field.

    The records' one check: every record that carries values runs it in its ``__post_init__``,
    which msgspec runs both when a record is made in Python and when a decoder builds one from a
    frame (after checking the same annotations itself); the rules between fields follow it there.
    """
    cls = type(record)
    schema = _SCHEMAS.get(cls)
    if schema is None:
        schema = _SCHEMAS[cls] = _schema(cls)
    fields, sequences, records = schema
    for name, classes in records:
        value = getattr(record, name)
        if not isinstance(value, classes):
            expected = " or ".join("None" if kind is type(None) else kind.__name__ for kind in classes)
            raise OptionTypeError(f"invalid {cls.__name__}: {name} must be {expected}, not {value!r:.80}")
    try:
        checked = msgspec.convert(astuple(record), fields)
    except msgspec.ValidationError as error:
        names = cls.__struct_fields__
        where = _POSITION.sub(lambda match: "`" + names[int(match[1])], str(error))
        why = f"invalid {cls.__name__}: {where}"
        raise (OptionTypeError(why) if _WRONG_TYPE.match(where) else ValueError(why)) from None
    for name in sequences:
        if type(getattr(record, name)) is list:
            _store(record, name, getattr(checked, name))


_POSITION = re.compile(r"`\$\[(\d+)\]")
"""Where msgspec says a value of an ``array_like`` Struct is: its field's position."""
_WRONG_TYPE = re.compile(r"Expected `[^`]*`, got `")
"""How msgspec words a value of the wrong type (a value out of a constraint reads ``Expected
`int` >= 1``; one out of a Literal, ``Invalid enum value``)."""


def _store(record: Struct, name: str, value: object) -> None:
    """Set field ``name`` of the frozen ``record`` while it is being made (in its ``__post_init__``).

    Through the field's slot: msgspec's ``force_setattr`` does the same but is missing from the
    oldest msgspec this package supports (0.18.0), and frozen Structs refuse ``object.__setattr__``.
    """
    getattr(type(record), name).__set__(record, value)


def _frozen(value: Any) -> Any:
    """``value`` with every dict and list in it made hashable (a dict as the frozenset of its
    items, a list as a tuple): equal values stay equal, so they hash alike.
    """
    if isinstance(value, dict):
        return frozenset((key, _frozen(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(item) for item in value)
    return value


def _record_hash(record: Struct) -> int:
    """The hash of a record whose fields hold JSON-like payloads (dicts, lists of dicts)."""
    return hash((type(record), *map(_frozen, astuple(record))))


class SamplingParams(Struct, frozen=True, omit_defaults=True):
    """What a request asks of generation and of its text, named as serving engines name it.

    The detokenizer uses the stop rules and the decode options; ``extra`` carries everything else
    (temperature, top_p, seed, ...) untouched to the scheduler. ``max_tokens`` (vLLM's name) and
    ``max_new_tokens`` (SGLang's) are one limit: give either (both only with the same value), and
    read either. :meth:`from_openai` reads an OpenAI-style request body. Every value is checked
    when the parameters are made (a :class:`ValueError` names the field), so parameters that
    exist are accepted by any request's opening.
    """

    max_new_tokens: Limit | None = None
    """Finish with reason ``"length"`` after this many generated tokens (None: no limit; else >= 1)."""
    min_tokens: Count = 0
    """No stop string, stop token or EOS ends the request before this many tokens (at most
    ``max_new_tokens``)."""
    stop: Sequence[StopString] = ()
    """Stop strings (non-empty; a list is stored as a tuple): the text ends where the earliest one
    completes."""
    stop_token_ids: Sequence[TokenId] = ()
    """Token ids that end the request (besides the tokenizer's EOS ids)."""
    ignore_eos: bool = False
    """Keep going past the tokenizer's EOS ids."""
    include_stop_str_in_output: bool = False
    """Emit the matched stop string at the end of the text."""
    skip_special_tokens: bool = True
    """Drop special tokens from the text, as ``decode(..., skip_special_tokens=True)`` does
    (True by default, as in vLLM, SGLang and OpenAI-style servers)."""
    clean_up_tokenization_spaces: bool | None = None
    """transformers' space cleanup; None means what the tokenizer's ``decode`` does by default."""
    max_byte_run: Count | None = None
    """The cap on a held byte-fallback run (``codec_for(..., max_byte_run=...)``): None for the
    manager's setting (no cap unless the manager or ``serve --max-byte-run`` sets one), 0 for no
    cap whatever the manager's setting, N >= 1 to hold at most N byte tokens of a still-valid run
    (exact unless a valid run longer than N later turns invalid)."""
    out_of_vocab: Literal["raise", "ignore"] | None = None
    """What an id past the vocabulary does (``codec_for(..., out_of_vocab=...)``): None for the
    manager's setting (``"raise"`` unless the manager or ``serve --out-of-vocab`` sets
    ``"ignore"``), ``"raise"`` (the id is skipped and named in the reply's error), ``"ignore"``
    (it decodes to nothing, exactly as ``tokenizer.decode`` skips it)."""
    spaces_between_special_tokens: bool | None = None
    """Passed to ``tokenizer.decode`` as it is; None means not passed (its default). Only
    transformers' CTC tokenizers (Wav2Vec2) act on it; every other decode ignores it."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Other sampling parameters, passed through to the scheduler as they are."""
    max_tokens: Limit | None = None
    """The limit under vLLM's name: always equal to :attr:`max_new_tokens`."""

    def __hash__(self) -> int:
        """A value's hash, :attr:`extra` included (equal parameters hash alike)."""
        return _record_hash(self)

    def __post_init__(self) -> None:
        # None for no stop strings or ids, as vLLM and OpenAI-style requests say it (in Python; on
        # the wire the field is left out).
        for name in _NONE_IS_EMPTY:
            if getattr(self, name) is None:
                _store(self, name, ())
        check(self)
        limit = self.max_new_tokens
        if self.max_tokens != limit:
            if limit is not None and self.max_tokens is not None:
                raise ValueError(
                    "give max_tokens or max_new_tokens (two names of one limit), not both with "
                    f"different values ({self.max_tokens} and {limit})"
                )
            limit = self.max_tokens if limit is None else limit
            _store(self, "max_new_tokens", limit)
            _store(self, "max_tokens", limit)
        if limit is not None and self.min_tokens > limit:
            raise ValueError(
                f"invalid SamplingParams: min_tokens ({self.min_tokens}) must not exceed "
                f"max_new_tokens ({limit})"
            )

    @classmethod
    def from_openai(cls, body: Mapping[str, Any]) -> SamplingParams:
        """The parameters of an OpenAI-style request body (``/v1/completions``,
        ``/v1/chat/completions``, with vLLM's extensions).

        Read: ``max_tokens`` and ``max_completion_tokens`` (the chat API's name for it: give
        either, or both with one value), ``stop`` (a string or a list of strings),
        ``stop_token_ids``, ``min_tokens``, ``include_stop_str_in_output``,
        ``skip_special_tokens``, ``spaces_between_special_tokens``, ``ignore_eos``; a null value
        means the default. Every other key goes to :attr:`extra` as it is. Raises
        :class:`ValueError` naming each bad key.
        """
        return _from_openai(cls, body)


_NONE_IS_EMPTY = ("stop", "stop_token_ids")
"""The parameters that take None for none."""


def _openai_int(value: object, low: int) -> int:
    if type(value) is not int:
        raise ValueError(f"must be an integer, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"must be >= {low}, got {value}")
    if value > MAX_INT:
        raise ValueError(f"must be <= 2**63 - 1 (the largest int a saved state holds), got {value}")
    return value


def _openai_bool(value: object) -> bool:
    if type(value) is not bool:
        raise ValueError(f"must be true or false, got {type(value).__name__} {value!r}")
    return value


def _openai_stop(value: object) -> tuple[str, ...]:
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list | tuple):
        raise ValueError(f"must be a string or a list of strings, got {type(value).__name__}")
    for stop in stops:
        if not isinstance(stop, str) or not stop:
            raise ValueError(f"must hold non-empty strings, got {stop!r}")
    return tuple(stops)


def _openai_ids(value: object) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"must be a list of token ids, got {type(value).__name__}")
    for token_id in value:
        if type(token_id) is not int or not 0 <= token_id <= MAX_INT:
            raise ValueError(f"must hold token ids (integers in [0, 2**63 - 1]), got {token_id!r:.40}")
    return tuple(value)


def _from_openai(cls: type[SamplingParams], body: object) -> SamplingParams:
    if not isinstance(body, Mapping):
        raise ValueError(f"an OpenAI request body is a JSON object, got {type(body).__name__}")
    readers: dict[str, Callable[[object], object]] = {
        "max_tokens": lambda value: _openai_int(value, 1),
        "max_completion_tokens": lambda value: _openai_int(value, 1),
        "stop": _openai_stop,
        "stop_token_ids": _openai_ids,
        "min_tokens": lambda value: _openai_int(value, 0),
        "include_stop_str_in_output": _openai_bool,
        "skip_special_tokens": _openai_bool,
        "spaces_between_special_tokens": _openai_bool,
        "ignore_eos": _openai_bool,
    }
    read: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in body.items():
        if not isinstance(key, str):
            problems.append(f"key {key!r}: keys must be strings")
        elif key not in readers:
            extra[key] = value
        elif value is not None:
            try:
                read[key] = readers[key](value)
            except ValueError as error:
                problems.append(f"{key}: {error}")
    completion = read.pop("max_completion_tokens", None)
    if completion is not None:
        if read.get("max_tokens", completion) != completion:
            problems.append(
                f"max_completion_tokens: {completion} but max_tokens {read['max_tokens']} "
                "(two names of one limit: give one, or both with one value)"
            )
        read["max_tokens"] = completion
    limit, floor = read.get("max_tokens"), read.get("min_tokens", 0)
    if limit is not None and floor > limit:
        problems.append(f"min_tokens: must not exceed max_tokens ({floor} > {limit})")
    if problems:
        raise ValueError("invalid request parameters: " + "; ".join(problems))
    return cls(**read, extra=extra)


DEFAULT_PARAMS = SamplingParams()
"""The parameters of a request that gives none."""


class Opening(Struct, frozen=True, omit_defaults=True):
    """How a request's detokenizer state starts: its prompt ids and its parameters, or the state
    a stopping worker handed back (:attr:`UserReply.state`), to continue the request exactly.
    """

    prompt_ids: Sequence[TokenId] = ()
    """The prompt (ids >= 0; a list is stored as a tuple): the text continues it, and no prompt
    text is ever emitted (none with a state)."""
    params: SamplingParams = DEFAULT_PARAMS
    """Stop rules and decode options for this request. With a :attr:`state`, its decode options
    choose the codec (the state's fingerprint must match it) and the state's own stop rules and
    token counters apply."""
    state: bytes | None = None
    """A handed-back stream (:meth:`puredetok.Stream.to_bytes`): the request goes on from it."""
    consumed: Count = 0
    """With a :attr:`state`: how many generated ids of the request it has consumed (the hand-back's
    :attr:`UserReply.consumed`); the message carrying this opening brings the ids from there on."""

    def __post_init__(self) -> None:
        check(self)
        if self.consumed and self.state is None:
            raise ValueError("consumed counts the ids a state has consumed: it needs a state")


class TokenizeMsg(Struct, frozen=True, omit_defaults=True):
    """Frontend -> worker: tokenize one request, given as plain ``text`` or as chat ``messages``.

    Chat messages (``[{"role": ..., "content": ...}, ...]``) go through the tokenizer's own chat
    template with the generation prompt added; ``template_options`` are passed to the template
    (for example ``{"enable_thinking": False}`` for Qwen3). The messages' text is data: special
    tokens in it are not parsed (unless :attr:`parse_special_tokens`).
    """

    KIND: ClassVar[str] = "tokenize"
    uid: Uid
    text: str | None = None
    """Plain text (exactly one of ``text`` and ``messages``)."""
    messages: Sequence[Any] | None = None
    """Chat messages (a list is stored as a tuple), checked per request (a malformed list is an
    error for this request only)."""
    params: SamplingParams = DEFAULT_PARAMS
    """Passed on to the scheduler in the :class:`UserMsg`."""
    template_options: dict[str, Any] = field(default_factory=dict)
    """Extra variables for the chat template."""
    add_special_tokens: bool = True
    """For plain text: let the tokenizer add its BOS/EOS (chat templates add their own)."""
    parse_special_tokens: bool = False
    """For chat messages: parse added-token text (special or not) in the caller's values (user,
    system and tool messages, template options) as those tokens. By default it is data:
    ``<|im_end|>`` or ``<think>`` written in a message is those characters, and only the chat
    template's own markers and the assistant turns' are control tokens. Only for callers that wrote
    every value themselves (never for a user's text). Plain ``text`` is encoded as the tokenizer
    encodes it (its added-token text parsed)."""

    def __hash__(self) -> int:
        """A value's hash, the chat messages and template options included."""
        return _record_hash(self)

    def __post_init__(self) -> None:
        check(self)


class DetokenizeMsg(Struct, frozen=True, omit_defaults=True):
    """Backend -> worker: the next generated token ids of one request (one or several).

    The first message of a request carries its :class:`Opening` (prompt ids, stop rules, decode
    options, or a handed-back state); a message for a uid the worker does not hold gets an error
    reply (:data:`UNKNOWN_REQUEST`) and never opens a request. ``finished`` says the scheduler has
    ended the request: the held-back text is flushed, and the reply's ``finish_reason`` is the
    scheduler's (``"length"`` if it gives none) unless a stop rule of the request ended it first.
    A ``"stop"`` on a token id that is this message's last id drops that token's text, as a stop
    token's (unless ``include_stop_str_in_output``); an ``"abort"`` emits nothing that was held.
    ``token_ids`` takes a list and stores a tuple; an id out of the vocabulary is the request's
    error, not the message's (its valid ids still apply).
    """

    KIND: ClassVar[str] = "detokenize"
    uid: Uid
    token_ids: Sequence[TokenId] = ()
    finished: bool = False
    open: Opening | None = None
    finish_reason: FinishKind | None = None
    """Why the scheduler ended the request (with ``finished`` only)."""
    matched_stop: str | int | None = None
    """The stop string or token id the scheduler stopped on (with ``finish_reason="stop"`` only)."""

    def __post_init__(self) -> None:
        # The usual message (a step's one id, nothing else) is checked here, what check() would
        # find of it, for a sixth of the cost: a client makes one per generated token.
        ids = self.token_ids
        if (
            type(ids) is tuple
            and len(ids) == 1
            and type(ids[0]) is int
            and 0 <= ids[0] <= MAX_INT
            and type(self.uid) in _UID_TYPES
            and self.finished is False
            and self.open is None
            and self.finish_reason is None
            and self.matched_stop is None
        ):
            return
        check(self)
        _check_reason(self.finished, self.finish_reason, self.matched_stop)


_UID_TYPES = (int, str)


def _check_reason(finished: bool, reason: str | None, matched: object) -> None:
    if reason is not None and reason not in ("stop", "length", "abort"):
        raise ValueError(f"finish_reason must be 'stop', 'length', 'abort' or None, not {reason!r}")
    if not finished and reason is not None:
        raise ValueError("a finish_reason needs finished=True")
    if matched is not None and reason != "stop":
        raise ValueError("a matched_stop needs finish_reason='stop'")


class AbortMsg(Struct, frozen=True, gc=False):
    """Frontend -> worker: the client is gone; drop the request here and at the scheduler."""

    KIND: ClassVar[str] = "abort"
    uid: Uid

    def __post_init__(self) -> None:
        check(self)


class HealthCheckMsg(Struct, frozen=True, gc=False):
    """Anyone -> worker: a probe answered with a :class:`HealthReply` through the same loop as work."""

    KIND: ClassVar[str] = "health"
    probe: int = 0

    def __post_init__(self) -> None:
        check(self)


class UserMsg(Struct, frozen=True, omit_defaults=True):
    """Worker -> backend: a tokenized request, ready to schedule."""

    KIND: ClassVar[str] = "user"
    uid: Uid
    input_ids: Sequence[TokenId]
    """The prompt's ids (a list is stored as a tuple)."""
    params: SamplingParams = DEFAULT_PARAMS

    def __post_init__(self) -> None:
        check(self)


UNKNOWN_REQUEST = "unknown request"
"""How the error of a reply begins when its message named a uid the worker does not hold (never
opened, ended and forgotten, or lost when a worker restarted): the request is not there, and the
message changed nothing. After a hand-back, messages sent before the re-opening get this error."""

HANDED_BACK = "handed back"
"""How the error of a reply begins when it carries a request's :attr:`UserReply.state`."""


class UserReply(Struct, frozen=True, gc=False, omit_defaults=True):
    """Worker -> frontend: new text of one request, and whether and why it ended.

    ``error`` is set when this request could not be handled (the rest of its batch is unaffected).
    A worker that stops hands each open request back: a reply with ``finished=True``, an
    ``error`` (starting with :data:`HANDED_BACK`, so that a client unaware of hand-backs sees the
    request end), the request's :attr:`state` and :attr:`consumed`; an :class:`Opening` with them
    continues it exactly on any worker of the same tokenizer.

    Replies are made one per message, so a reply is not checked when it is made: its rules (a
    ``finish_reason`` or ``matched_stop`` only once finished; a ``state`` with its ``consumed``)
    are checked where replies are framed and read, :meth:`ReplyBatch.of` and the
    :class:`ReplyBatch` columns (a reply that breaks them is never sent nor received).
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
    state: bytes | None = None
    """The request's stream, handed back by a worker that stops (``Stream.to_bytes()``)."""
    consumed: int | None = None
    """With a :attr:`state`: how many generated ids of the request the state has consumed."""


class AbortBackendMsg(Struct, frozen=True, gc=False):
    """Worker -> backend: stop generating for this request (the client aborted, or a stop rule
    ended it on the worker's side).
    """

    KIND: ClassVar[str] = "abort_backend"
    uid: Uid

    def __post_init__(self) -> None:
        check(self)


class HealthReply(Struct, frozen=True):
    """Worker -> frontend: the answer to a :class:`HealthCheckMsg`."""

    KIND: ClassVar[str] = "health_reply"
    probe: int
    worker: str
    pid: int
    live_requests: int
    messages_handled: dict[str, int] = field(default_factory=dict)
    """Messages handled since start, by kind."""
    frames_dropped: dict[str, int] = field(default_factory=dict)
    """Frames or messages dropped since start, by reason."""
    address: str = ""
    """The address the worker listens on (what tells one worker from another: see
    :class:`ReadyMsg`)."""
    instance: str = ""
    """The worker's :attr:`ReadyMsg.instance`."""


class ReadyMsg(Struct, frozen=True, gc=False):
    """Worker -> frontend: sent once, when the worker is listening and its tokenizer is loaded.

    A worker is its ``address``: a ``ReadyMsg`` from an address already heard from, with another
    ``instance``, means the worker there was restarted, and the requests it held are lost (see
    :class:`~puredetok.worker._routing.Incarnations`). The name and the pid are labels: two
    workers can share them (two unnamed :class:`~puredetok.worker.Worker` objects of one process
    are both ``worker-{pid}``), and a worker restarted in the same process keeps its pid.
    """

    KIND: ClassVar[str] = "ready"
    worker: str
    pid: int
    address: str
    instance: str = ""
    """Unique to this worker (a new one for every :class:`~puredetok.worker.Worker` object, so on
    every start, in the same process or another)."""
    incarnation: int = 0
    """How many times the pool has restarted this worker (0: its first start)."""
    protocol: int = PROTOCOL_VERSION
    """The wire protocol version the worker speaks (:data:`PROTOCOL_VERSION`); its frames carry it."""


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


class Batch(Struct, frozen=True):
    """Messages of one kind, as records: a frame on the wire (``[kind, [message, ...]]``)."""

    kind: str
    items: tuple[Message, ...]

    def __len__(self) -> int:
        return len(self.items)


Reason: TypeAlias = tuple[int, FinishKind, str | int | None]
"""In a :class:`DetokenizeBatch`: ``(position, finish_reason, matched_stop)`` the scheduler gave."""
Ended: TypeAlias = tuple[int, str | None, str | int | None]
"""In a :class:`ReplyBatch`: ``(position, finish_reason, matched_stop)`` of a request that ended."""
Failed: TypeAlias = tuple[int, str]
"""In a :class:`ReplyBatch`: ``(position, error)`` of a message that could not be handled."""
Handed: TypeAlias = tuple[int, bytes, int]
"""In a :class:`ReplyBatch`: ``(position, state, consumed)`` of a request handed back."""


def _positions(name: str, positions: Iterable[int], size: int) -> None:
    for position in positions:
        if not 0 <= position < size:
            raise ValueError(f"{name} names position {position} of a batch of {size} messages")


class DetokenizeBatch(Struct, frozen=True, omit_defaults=True):
    """Backend -> worker: :class:`DetokenizeMsg` messages of many requests, column by column.

    Message ``n`` is request ``uids[n]``; its ids are the next ``counts[n]`` of ``token_ids`` (one
    each when ``counts`` is None, the usual decode step); it ends its request when ``n`` is in
    ``finished``, with the scheduler's reason when ``n`` is in ``reasons``, and opens it with the
    :class:`Opening` paired with ``n`` in ``opens``.

    Its shape (lengths, counts, positions, reasons) is checked when it is made; its cells where
    they come from: by the frame decoder (the same annotations as :class:`DetokenizeMsg`'s, token
    ids in ``[0, 2**63 - 1]`` included) or by the checked messages :meth:`of` takes. Checking every
    cell again here would cost each token of a decoded frame a second pass over its ids.
    """

    KIND: ClassVar[str] = "detokenize"
    uids: tuple[Uid, ...]
    token_ids: tuple[TokenId, ...]
    counts: tuple[Count, ...] | None = None
    finished: tuple[int, ...] = ()
    opens: tuple[tuple[int, Opening], ...] = ()
    reasons: tuple[Reason, ...] = ()
    """``(position, finish_reason, matched_stop)`` of finished messages that say why."""

    def __post_init__(self) -> None:
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
        if self.reasons:
            finished = frozenset(self.finished)
            for position, reason, matched in self.reasons:
                _check_reason(position in finished, reason, matched)
            if len({position for position, _, _ in self.reasons}) != len(self.reasons):
                raise ValueError("reasons names a position twice")

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
        reasons = {position: (reason, matched) for position, reason, matched in self.reasons}
        counts = self.counts if self.counts is not None else (1,) * len(self.uids)
        messages, cursor = [], 0
        for position, (uid, count) in enumerate(zip(self.uids, counts)):
            ids = self.token_ids[cursor : cursor + count]
            cursor += count
            reason, matched = reasons.get(position, (None, None))
            messages.append(
                DetokenizeMsg(uid, ids, position in finished, opens.get(position), reason, matched)
            )
        return tuple(messages)

    @classmethod
    def of(cls, messages: Sequence[DetokenizeMsg]) -> DetokenizeBatch:
        """The batch of these messages.

        The columns every message fills are read a pass each (a comprehension reads a field for
        about a third of what a tuple of all six fields and its transposition cost), the ids of a
        batch of one id each (the decode step) unpacked in their pass. The usual message neither
        ends nor opens its request: one pass says whether any does, before the positions of those
        that do are looked for.
        """
        uids = tuple([message.uid for message in messages])
        ids = [message.token_ids for message in messages]
        try:
            flat, counts = tuple([token for (token,) in ids]), None
        except ValueError:  # a message without exactly one id
            flat, counts = tuple(chain.from_iterable(ids)), tuple(map(len, ids))
        if not any([message.finished or message.open is not None for message in messages]):
            return cls(uids, flat, counts)
        finished = tuple(compress(range(len(messages)), [message.finished for message in messages]))
        ended = [messages[position] for position in finished]
        return cls(
            uids,
            flat,
            counts,
            finished,
            tuple(
                (position, message.open)
                for position, message in enumerate(messages)
                if message.open is not None
            ),
            tuple(
                (position, message.finish_reason, message.matched_stop)
                for position, message in zip(finished, ended)
                if message.finish_reason is not None
            ),
        )


class ReplyBatch(Struct, frozen=True, gc=False, omit_defaults=True):
    """Worker -> frontend: :class:`UserReply` messages, column by column.

    Reply ``n`` is request ``uids[n]``, with new text ``outputs[n]``; ``ended`` lists the replies
    whose request has finished, with the reason and the matched stop, ``errors`` those with an
    error, and ``handed`` those that hand their request back (see :class:`UserReply`).
    """

    KIND: ClassVar[str] = "reply"
    uids: tuple[Uid, ...]
    outputs: tuple[str, ...]
    ended: tuple[Ended, ...] = ()
    errors: tuple[Failed, ...] = ()
    handed: tuple[Handed, ...] = ()

    def __post_init__(self) -> None:
        size = len(self.uids)
        if len(self.outputs) != size:
            raise ValueError(f"{size} uids but {len(self.outputs)} outputs")
        _positions("ended", (position for position, _, _ in self.ended), size)
        _positions("errors", (position for position, _ in self.errors), size)
        _positions("handed", (position for position, _, _ in self.handed), size)

    @property
    def kind(self) -> str:
        """``"reply"``."""
        return self.KIND

    def __len__(self) -> int:
        return len(self.uids)

    @property
    def items(self) -> tuple[UserReply, ...]:
        """The replies, as records."""
        return tuple(self.replies())

    def replies(self) -> list[UserReply]:
        """The replies, as a list of records (what ``DetokenizeManager.handle`` returns)."""
        uids, outputs = self.uids, self.outputs
        replies = list(map(UserReply, uids, outputs))  # the usual reply: new text, nothing else
        if not (self.ended or self.errors or self.handed):
            return replies
        ended = {position: (reason, matched) for position, reason, matched in self.ended}
        errors = dict(self.errors)
        handed = {position: (state, consumed) for position, state, consumed in self.handed}
        for position in sorted(ended.keys() | errors.keys() | handed.keys()):
            reason, matched = ended.get(position, (None, None))
            state, consumed = handed.get(position, (None, None))
            finished = position in ended or position in handed
            replies[position] = UserReply(
                uids[position],
                outputs[position],
                finished,
                reason,
                matched,
                errors.get(position),
                state,
                consumed,
            )
        return replies

    @classmethod
    def of(cls, replies: Sequence[UserReply]) -> ReplyBatch:
        """The batch of these replies; raises :class:`ValueError` if one breaks the rules of a
        reply (see :class:`UserReply`).
        """
        for reply in replies:
            if not reply.finished and (reply.finish_reason is not None or reply.matched_stop is not None):
                raise ValueError(
                    f"reply {reply.uid!r}: a reply not finished has no finish_reason nor matched_stop"
                )
            if (reply.state is None) != (reply.consumed is None):
                raise ValueError(
                    f"reply {reply.uid!r}: a handed-back state comes with the count of ids it has consumed"
                )
        return cls(
            tuple(reply.uid for reply in replies),
            tuple(reply.incremental_output for reply in replies),
            tuple((n, r.finish_reason, r.matched_stop) for n, r in enumerate(replies) if r.finished),
            tuple((n, r.error) for n, r in enumerate(replies) if r.error is not None),
            tuple(
                (n, r.state, r.consumed)
                for n, r in enumerate(replies)
                if r.state is not None and r.consumed is not None
            ),
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
        handed: list[Handed] = []
        for batch in batches:
            offset = len(uids)
            uids += batch.uids
            outputs += batch.outputs
            ended += [(offset + position, reason, matched) for position, reason, matched in batch.ended]
            errors += [(offset + position, error) for position, error in batch.errors]
            handed += [(offset + position, state, consumed) for position, state, consumed in batch.handed]
        return cls(tuple(uids), tuple(outputs), tuple(ended), tuple(errors), tuple(handed))


AnyBatch: TypeAlias = Batch | DetokenizeBatch | ReplyBatch
"""What a frame holds: ``.kind``, ``len()`` and ``.items`` (the message records) on each."""

COLUMNS: dict[str, type[DetokenizeBatch] | type[ReplyBatch]] = {
    DetokenizeBatch.KIND: DetokenizeBatch,
    ReplyBatch.KIND: ReplyBatch,
}
"""The kinds that travel column by column, and their batch classes."""
