"""Codecs, states, streams and every public record, sent where a program sends them: through pickle
(every protocol), cloudpickle (Ray's, and the standalone package where it is installed), Ray's
object store and a Ray task, and a process started with ``spawn``.

Each comes back equal; a state or a stream (which travels as its bytes, without its codec:
docs/guarantees.md, "The state as a value") comes back as a ``SavedState`` or ``SavedStream`` that,
resumed with the codec that travelled too (or the one that stayed), continues with exactly the
future the untransported one has, which is ``tokenizer.decode``'s. On every tokenizer in tests/data,
the generic fallback codec, and the classes that decode in Python. One Ray session and one spawned
process serve the whole module.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import inspect
import logging
import multiprocessing
import pickle
import re
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import attrs
import msgspec
import pytest
import ray
from ray import cloudpickle as ray_cloudpickle

import families
import puredetok
import transport_tasks
from helpers import TOKENIZERS, codec, reference, tokenizer
from puredetok import Codec, DecodeState, SavedState, SavedStream, StopRules, Stream
from puredetok._core import continuation_text
from transport_tasks import future

ROOT = Path(__file__).resolve().parents[2]

CLASSES = ("byt5", "whisper", "clip", "wav2vec2", "marian")
"""The tokenizer classes that decode in Python (tests/families.py builds them)."""

KINDS = (*TOKENIZERS, "window:llama2", *(f"class:{name}" for name in CLASSES))
"""Every tokenizer in tests/data (decode options under which each family holds something
mid-stream: skipping special tokens, transformers' space cleanup on), the generic fallback codec,
and the classes that decode in Python."""

TEXT = "Hi  there, don't stop — it's 1.5 . ok ?\n  𝔘𝔫𝔦 ꙮ 🀄🎉 中文 naïve — done.  The end, really."
"""Split characters, byte runs, spaces that cleanup rewrites: what a state holds mid-stream."""

NEVER = "\ue000"
"""A character no text here holds: a stop string ending with it never completes."""


@attrs.frozen
class Source:
    """A codec, the ids of :data:`TEXT`, and the tokenizer's own decode with the codec's options."""

    codec: Codec
    ids: tuple[int, ...]
    decode: Callable[[Sequence[int]], str]


@functools.cache
def source(kind: str) -> Source:
    if kind.startswith("window:"):
        tok = tokenizer(kind.removeprefix("window:"))
        built = puredetok.codec_for(tok, skip_special_tokens=True, window=True)
        return Source(built, tuple(tok.encode(TEXT, add_special_tokens=False)), _decoder(tok))
    if kind.startswith("class:"):
        tok = families.family(kind.removeprefix("class:"))
        built = puredetok.codec_for(tok, skip_special_tokens=True)
        return Source(built, tuple(tok.encode(TEXT, add_special_tokens=False)), _decoder(tok))
    ids = tuple(tokenizer(kind).encode(TEXT, add_special_tokens=False))
    return Source(codec(kind, True, cleanup=True), ids, lambda i: reference(kind, i, True, cleanup=True))


def _decoder(tok: Any) -> Callable[[Sequence[int]], str]:
    return lambda ids: str(tok.decode(list(ids), skip_special_tokens=True))


@attrs.frozen
class Sample:
    """A state or stream to send, the ids still to come, and the text they give (``decode``'s)."""

    label: str
    value: DecodeState | Stream
    rest: tuple[int, ...]
    expected: str


def _stepped(c: Codec, ids: Sequence[int]) -> Iterator[tuple[int, DecodeState, str]]:
    """After each id: its position, the state, and the text emitted up to there."""
    state, emitted = puredetok.start(c), ""
    for position, token_id in enumerate(ids):
        state, delta = puredetok.step(state, token_id)
        emitted += delta
        yield position, state, emitted


@functools.cache
def samples(kind: str) -> tuple[Sample, ...]:
    """A fresh state; states holding something mid-stream (the first and the last that do: inside
    a byte run, a split character, whitespace cleanup may change); one after a prompt that ends
    holding; and a stream after a prompt, with stop rules and counters, holding the start of a
    stop string."""
    c, ids, decode = source(kind).codec, source(kind).ids, source(kind).decode
    whole = decode(ids)
    found = [
        (position, state, emitted)
        for position, state, emitted in _stepped(c, ids)
        if state.hold not in (c.decoding.idle, c.decoding.initial)
    ]
    assert found, f"{kind}: no state holds anything mid-stream"
    made = [Sample("fresh", puredetok.start(c), ids, whole)]
    for label, (position, state, emitted) in (("holding", found[0]), ("holding, last", found[-1])):
        assert whole.startswith(emitted)
        made.append(Sample(f"{label} at {position}", state, ids[position + 1 :], whole[len(emitted) :]))
    cut = found[0][0] + 1
    prompted = puredetok.start(c, ids[:cut])
    expected = continuation_text(decode(ids[:cut]), whole)
    made.append(Sample(f"after a prompt of {cut}", prompted, ids[cut:], expected))
    made.append(_stream_sample(kind))
    return tuple(made)


def _stream_sample(kind: str) -> Sample:
    """A stream after a prompt of 3 ids, its rules a stop string that never completes (so that the
    stream holds its start mid-way) and one that ends it near the end, with ``min_tokens`` and
    ``max_new_tokens`` counting."""
    c, ids, decode = source(kind).codec, source(kind).ids, source(kind).decode
    prompt, output = ids[:3], ids[3:]
    full = continuation_text(decode(prompt), decode(ids))
    # where the core's text ends after each id: the stream holds a stop string's start there
    ends = sorted({len(emitted) for _, _, emitted in _stepped_after(c, prompt, output)})
    middle = next(end for end in ends[len(ends) // 3 :] + ends if end)
    endings = [full[end - 3 : end] for end in ends if end - 3 >= middle]
    ending = next((e for e in endings if e.strip() and full.find(e) >= middle), "")
    stops = [full[middle - 1 : middle] + NEVER, *([ending] if ending else [])]
    rules = StopRules(stop=stops, min_tokens=1, max_new_tokens=len(output) + 5)
    stream, emitted = puredetok.open_stream(c, rules, prompt), ""
    for position, token_id in enumerate(output):
        stream, delta = puredetok.advance(stream, token_id)
        emitted += delta
        if stream.held:
            expected = full[len(emitted) : full.find(ending) if ending else len(full)]
            return Sample(f"stream holding {stream.held!r}", stream, output[position + 1 :], expected)
    raise AssertionError(f"{kind}: the stream never held the start of {rules.stop[0]!r}")


def _stepped_after(
    c: Codec, prompt: Sequence[int], ids: Sequence[int]
) -> Iterator[tuple[int, DecodeState, str]]:
    state, emitted = puredetok.start(c, prompt), ""
    for position, token_id in enumerate(ids):
        state, delta = puredetok.step(state, token_id)
        emitted += delta
        yield position, state, emitted


def payload(kind: str) -> list[Any]:
    """What is sent: the codec, each sample's state or stream, and their saved forms (the records
    and their bytes)."""
    values = [sample.value for sample in samples(kind)]
    saved = [SavedStream(v.to_bytes()) if isinstance(v, Stream) else SavedState(v.to_bytes()) for v in values]
    return [source(kind).codec, *values, *saved, *(v.to_bytes() for v in values)]


def check_came_back(kind: str, back: list[Any]) -> None:
    """The codec equal; each state or stream a saved record that, resumed with either codec, is
    equal to what was sent and continues with its future; the saved forms equal."""
    sent = payload(kind)
    assert len(back) == len(sent)
    travelled = back[0]
    assert type(travelled) is Codec and travelled == source(kind).codec
    assert travelled.fingerprint == source(kind).codec.fingerprint
    count = len(samples(kind))
    for sample, value in zip(samples(kind), back[1 : 1 + count]):
        is_stream = isinstance(sample.value, Stream)
        assert type(value) is (SavedStream if is_stream else SavedState), sample.label
        for c in (travelled, source(kind).codec):
            resumed = value.resume(c)
            assert resumed == sample.value, sample.label
            assert future(resumed, sample.rest) == future(sample.value, sample.rest), sample.label
        assert future(sample.value, sample.rest) == sample.expected, sample.label
    assert back[1 + count :] == sent[1 + count :]


def test_every_sample_holds_what_it_says_and_its_future_is_decodes() -> None:
    """The samples themselves (before any transport): each kind has states that hold something,
    one after a prompt, and a stream holding the start of a stop string; the untransported future
    of each is decode's."""
    for kind in KINDS:
        made = samples(kind)
        assert [s.label.split(" ")[0] for s in made] == ["fresh", "holding", "holding,", "after", "stream"]
        for sample in made:
            assert future(sample.value, sample.rest) == sample.expected, (kind, sample.label)


# -- pickle and cloudpickle -------------------------------------------------------------------

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def _cloudpicklers() -> list[ModuleType]:
    found: list[ModuleType] = [ray_cloudpickle]
    try:
        found.append(importlib.import_module("cloudpickle"))
    except ImportError:  # not a dependency: Ray's own copy is what Ray uses
        pass
    return found


CLOUDPICKLERS = _cloudpicklers()

BY_VALUE = re.compile(rb"_make_function|_make_skeleton_class|_make_skeleton_enum|_function_setstate")
"""What cloudpickle writes to rebuild a function or class by value (a copy of its code, run with
globals it restores later), where a pickle names it for the other side to import."""


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", KINDS)
def test_through_pickle(kind: str, protocol: int) -> None:
    sent = payload(kind)
    if kind.startswith("window:") and protocol < 2:
        # The generic fallback decodes with the tokenizer itself, which it holds: it pickles as
        # the tokenizer does, and a `tokenizers` backend does from protocol 2 on only.
        with pytest.raises(TypeError, match="cannot pickle 'Tokenizer' object"):
            pickle.dumps(sent[0], protocol=protocol)
        codec_back = pickle.loads(pickle.dumps(sent[0], protocol=2))
        check_came_back(kind, [codec_back, *pickle.loads(pickle.dumps(sent[1:], protocol=protocol))])
        return
    check_came_back(kind, pickle.loads(pickle.dumps(sent, protocol=protocol)))


@pytest.mark.parametrize("pickler", CLOUDPICKLERS, ids=lambda module: module.__name__)
@pytest.mark.parametrize("kind", KINDS)
def test_through_cloudpickle_nothing_is_copied_by_value(kind: str, pickler: ModuleType) -> None:
    """Everything of the package is pickled by its name, as pickle does: Ray's cloudpickle copied
    a byte-fallback codec's ``Rope.of`` by value (a class method is not what its name finds), and
    that copy could not run in a Ray worker (``NameError: name 'EMPTY_ROPE' is not defined``)."""
    data = pickler.dumps(payload(kind))
    assert not BY_VALUE.search(data)
    check_came_back(kind, pickler.loads(data))


# -- Ray ----------------------------------------------------------------------------------


@attrs.frozen
class RaySession:
    echo: Any
    """``transport_tasks.echo`` as a Ray task."""
    resume_and_continue: Any
    """``transport_tasks.resume_and_continue`` as a Ray task."""


@pytest.fixture(scope="module")
def ray_session() -> Iterator[RaySession]:
    """One local Ray of one CPU for the module; the tasks' module is sent by value (its folder is
    not on a Ray worker's path), and the package by name."""
    assert not ray.is_initialized()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    ray_cloudpickle.register_pickle_by_value(transport_tasks)
    try:
        yield RaySession(ray.remote(transport_tasks.echo), ray.remote(transport_tasks.resume_and_continue))
    finally:
        ray_cloudpickle.unregister_pickle_by_value(transport_tasks)
        ray.shutdown()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", KINDS)
def test_through_rays_object_store_and_tasks(kind: str, ray_session: RaySession) -> None:
    """``ray.put`` / ``ray.get``; a task given the codec by its object reference that resumes each
    state and stream and continues it; a task that returns what it was given."""
    check_came_back(kind, ray.get(ray.put(payload(kind))))
    codec_ref = ray.put(source(kind).codec)
    assert ray.get(codec_ref) == source(kind).codec
    sent = [(sample.value, sample.rest) for sample in samples(kind)]
    results = ray.get(ray_session.resume_and_continue.remote(codec_ref, sent))
    assert results == [(sample.expected, sample.value.to_bytes()) for sample in samples(kind)]
    check_came_back(kind, ray.get(ray_session.echo.remote(payload(kind))))


# -- a spawned process ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def spawned() -> Iterator[Any]:
    """One process started with ``spawn`` (nothing inherited: all it has is unpickled)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        yield pool


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", KINDS)
def test_in_a_spawned_process(kind: str, spawned: Any) -> None:
    sent = [(sample.value, sample.rest) for sample in samples(kind)]
    results = spawned.apply(transport_tasks.resume_and_continue, (source(kind).codec, sent))
    assert results == [(sample.expected, sample.value.to_bytes()) for sample in samples(kind)]
    check_came_back(kind, spawned.apply(transport_tasks.echo, (payload(kind),)))


# -- every public record ----------------------------------------------------------------------

PUBLIC = re.findall(r"^::: ([\w.]+)$", (ROOT / "docs" / "api.md").read_text(encoding="utf-8"), flags=re.M)
"""The public modules: those the API reference documents (tests/package/test_api_reference.py)."""


def _is_record(cls: type) -> bool:
    """A class whose instances are values: attrs and msgspec records, dataclasses, errors, enums."""
    return (
        attrs.has(cls)
        or issubclass(cls, (msgspec.Struct, BaseException, enum.Enum))
        or dataclasses.is_dataclass(cls)
    )


def public_records() -> set[type]:
    found = set()
    for name in PUBLIC:
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", ()):
            value = getattr(module, public)
            if inspect.isclass(value) and value.__module__.startswith("puredetok") and _is_record(value):
                found.add(value)
    return found


KEPT_HOME = {
    "puredetok.testing.CoreStream": "a live detokenizer under test (mutable), not a value",
}
"""Public records that hold what only their own process has, and why (they are not sent)."""

SENT_ABOVE = {Codec, DecodeState, Stream}
"""Sent by the tests above, on every kind of codec."""


ENCODE = cast(Callable[[str], list[int]], list)
"""A stand-in for a tokenizer's encode in a record: a function a pickle names (as a tokenizer's
bound method is not)."""


def records() -> list[Any]:
    """One value of each public record that is sent (:data:`KEPT_HOME` and :data:`SENT_ABOVE`
    aside), its fields set to other values than their defaults."""
    from puredetok.client._common import (
        HandBack,
        RequestError,
        RequestHandedBack,
        RequestLost,
        RequestTimeout,
    )
    from puredetok.errors import (
        CodecMismatchError,
        InvalidStateError,
        InvalidTokenError,
        OptionTypeError,
        PuredetokError,
        StateTypeError,
        StreamFinishedError,
        UnsupportedTokenizerError,
    )
    from puredetok.serving import _messages as m
    from puredetok.serving._loading import TokenizerLoadError, default_tokenizer_path
    from puredetok.serving._tokenize_manager import TokenizeError, TokenizeResult
    from puredetok.stops import FinishReason
    from puredetok.testing._checks import ConformanceError, Guarantee, Reference, Violation
    from puredetok.testing.strategies import Vocabulary
    from puredetok.worker._addresses import AddressError
    from puredetok.worker._scan import ScanError
    from puredetok.worker._wire import Decoded, DropCounter, FrameError, Rejected
    from puredetok.worker._worker import Limits, WorkerStats
    from puredetok_audit._compare import AuditOptions, Deferred, Difference, Facts
    from puredetok_audit._distributed import TaskFailedError, Timing
    from puredetok_audit._files.compressed import Decompressed
    from puredetok_audit._follow import Followed
    from puredetok_audit._parsers import Joined
    from puredetok_audit._records import Chunk, Columns, InputError, Request, Skipped
    from puredetok_audit._report import Tally
    from puredetok_audit._sources import Shard, ShardResult
    from puredetok_audit.replay._incremental import Ending
    from puredetok_audit.replay._replay import ReplaySummary, RequestReport
    from puredetok_audit.replay._trace import TraceError, TraceEvent, TraceHeader

    c = source("llama2").codec
    params = m.SamplingParams(
        max_new_tokens=9,
        min_tokens=2,
        stop=["</a>"],
        stop_token_ids=[7],
        include_stop_str_in_output=True,
        skip_special_tokens=False,
        clean_up_tokenization_spaces=True,
        max_byte_run=64,
        out_of_vocab="ignore",
        spaces_between_special_tokens=False,
        extra={"temperature": 0.5},
    )
    opening = m.Opening((1, 2), params, b"saved", 3)
    request = Request(
        "r1", 4, (1, 2), (3, 4), "text", "stop", "</a>", True, False, (Chunk("te", 1), Chunk("xt", 1)), True
    )
    violation = Violation(Guarantee.EXACT, (5, 6), 1, True, "a", "ab", "one character short", (4,))
    reply = m.UserReply("u", "text", True, "stop", "</a>", None, b"state", 3)
    stream = puredetok.open_stream(c, StopRules(stop=["</a>"], max_new_tokens=5), [1, 2])
    return [
        SavedState(puredetok.start(c, [1, 2]).to_bytes()),
        SavedStream(stream.to_bytes()),
        FinishReason("stop", "</a>"),
        StopRules(
            stop=["</a>", "\n\n"], stop_token_ids=[7], eos_token_ids=[2], max_new_tokens=9, min_tokens=1
        ),
        params,
        opening,
        m.TokenizeMsg("t", "hello", None, params, {"enable_thinking": False}, False, True),
        m.TokenizeMsg(2, None, ({"role": "user", "content": "hi"},)),
        m.DetokenizeMsg("u", (5, 6), True, opening, "stop", "</a>"),
        m.AbortMsg(3),
        m.HealthCheckMsg(7),
        m.UserMsg("u", (1, 2, 3), params),
        reply,
        m.AbortBackendMsg("u"),
        m.HealthReply(1, "w", 42, 3, {"detokenize": 2}, {"bad_frame": 1}),
        m.ReadyMsg("w", 42, "ipc:///tmp/w", "i", 2),
        m.Batch("detokenize", (m.DetokenizeMsg(1, (2,)), m.AbortMsg(2))),
        m.DetokenizeBatch((1, "b"), (5, 6, 7), (2, 1), (1,), ((0, opening),), ((1, "stop", 7),)),
        m.ReplyBatch((1, "b"), ("x", "y"), ((1, "stop", "</a>"),), ((0, "bad id"),), ((0, b"s", 2),)),
        InvalidTokenError(-1, 10, 3),
        InvalidTokenError("x", 10, why="not an id"),
        StreamFinishedError("finished (stop)"),
        UnsupportedTokenizerError("not a tokenizer"),
        InvalidStateError("corrupt"),
        CodecMismatchError("another codec"),
        StateTypeError("advance_each", "Stream", SavedState(b""), 3),
        OptionTypeError("skip_special_tokens must be True or False, not str 'false'"),
        PuredetokError("any of the package's errors"),
        AuditOptions(True, False, True, 12, False),
        Deferred(default_tokenizer_path),
        Difference(request, "lost tail", 3, 1, "text", "tex", 4, 3, 1, (1, 2), 5),
        Facts(4, 3, 3, "</a>", True, False, True, False, True, False),
        Timing(42, 1.0, 2.0, 0.5, 3.0, 4.0, 0.25),
        TaskFailedError("a Ray task failed: x.jsonl: FileNotFoundError: gone"),
        Followed(request, None, "an error"),
        Joined("text", (0, 2), (1, 3)),
        Chunk("text", 2, (("reasoning", "a"),)),
        Columns("p", "r", "t", "id"),
        InputError("log.jsonl", 3, "not JSON"),
        request,
        Skipped("log.jsonl", 5, "aborted"),
        Tally(3, 10, 1, 1, 1, {"lost tail": 1}, 2, 1, 1, 1, 1),
        Shard("/logs/a.jsonl.gz", "vllm", "lines", 0, 100, 3, 2, 1, "gzip", 1024, 1, 2),
        ShardResult(
            1,
            [{"id": "r1", "kind": "lost tail"}],
            Tally(1),
            Timing(1, 1.0, 2.0, 0.5, 3.0, 4.0, 0.25),
            2,
            False,
        ),
        HandBack("u", b"state", 3),
        RequestError("u", "failed", reply),
        RequestTimeout(7, "no reply in 5 s"),
        RequestLost("u", "the worker restarted"),
        RequestHandedBack(HandBack("u", b"state", 3), reply),
        Decompressed("/logs/a.jsonl.gz", "gzip", "cut short", 7),
        Ending(3, 10, 12, True, "around"),
        ReplaySummary(2, 10, 1, 5, 1, 1, 1, 2, [("u", ["a failure"])]),
        RequestReport("u", (1, 2), params, c, [3, 4], 2, finish_reason="stop", matched="</a>", errors=["e"]),
        TraceEvent(3, "u", (1, 2), (5,), params, True, False),
        TraceHeader("llama2", params),
        TraceError(3, "not an event"),
        TokenizerLoadError("no tokenizer at /nowhere"),
        TokenizeError("message 0: no content"),
        TokenizeResult("u", array("i", [1, 2, 3]), None),
        ConformanceError(violation),
        Guarantee.EXACT,
        Reference(repr, c),
        violation,
        Vocabulary(5, (4,), (0, 4), {b"a": 1}, ENCODE, ENCODE, None),
        AddressError("not a private folder"),
        ScanError("too_deep", "nested past 64 levels"),
        Decoded(m.Batch("abort", (m.AbortMsg(1),)), (Rejected("detokenize", 1, "u", "bad id", True),)),
        DropCounter(logging.getLogger("puredetok.worker"), {"bad_frame": 2}),
        FrameError("bad_frame", "not msgpack"),
        Rejected("detokenize", 1, None, "bad id"),
        Limits(1024, 100, 100, 10, 4, 64, 4096, 2, 16),
        WorkerStats("w", {"detokenize": 2}, 3, {"bad_frame": 1}, 1),
    ]


def same(sent: Any, back: Any) -> bool:
    """Equal; an error or a record compared by identity (which do not define equality) of the
    same class and the same fields (an error: its message and attributes)."""
    if isinstance(sent, BaseException):
        return type(back) is type(sent) and back.args == sent.args and vars(back) == vars(sent)
    if attrs.has(type(sent)) and "__eq__" not in vars(type(sent)):
        return type(back) is type(sent) and attrs.astuple(back, recurse=False) == attrs.astuple(
            sent, recurse=False
        )
    return type(back) is type(sent) and bool(back == sent)


def each_through(dumps: Callable[[Any], bytes], loads: Callable[[bytes], Any]) -> list[Any]:
    """Each record sent alone, so that every one that cannot come back is named."""
    back, failed = [], []
    for value in records():
        try:
            data = dumps(value)
            assert not BY_VALUE.search(data), "copied by value"
            back.append(loads(data))
        except Exception as error:  # noqa: BLE001 (every record's failure is listed)
            failed.append(f"{type(value).__qualname__}: {type(error).__name__}: {error}")
    assert not failed, "\n".join(failed)
    return back


def check_records_came_back(back: list[Any]) -> None:
    sent = records()
    assert len(back) == len(sent)
    wrong = [
        f"{type(a).__qualname__}: {a!r} came back as {b!r}" for a, b in zip(sent, back) if not same(a, b)
    ]
    assert not wrong, "\n".join(wrong)


def test_every_public_record_is_sent_or_says_why_not() -> None:
    """A record added to a public module is sent by these tests (or named here with its reason);
    private records that travel (a shard's result in Ray, a file's compression) are sent too."""
    sent = {type(value) for value in records()}
    named = {cls for cls in public_records() if f"{cls.__module__}.{cls.__qualname__}" in KEPT_HOME}
    assert len(named) == len(KEPT_HOME)
    assert public_records() - SENT_ABOVE - named <= sent


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_public_record_through_pickle(protocol: int) -> None:
    check_records_came_back(each_through(functools.partial(pickle.dumps, protocol=protocol), pickle.loads))


@pytest.mark.parametrize("pickler", CLOUDPICKLERS, ids=lambda module: module.__name__)
def test_every_public_record_through_cloudpickle(pickler: ModuleType) -> None:
    check_records_came_back(each_through(pickler.dumps, pickler.loads))


@pytest.mark.timeout(300)
def test_every_public_record_through_ray(ray_session: RaySession) -> None:
    check_records_came_back(ray.get(ray.put(records())))
    check_records_came_back(ray.get(ray_session.echo.remote(records())))


@pytest.mark.timeout(300)
def test_every_public_record_through_a_spawned_process(spawned: Any) -> None:
    check_records_came_back(spawned.apply(transport_tasks.echo, (records(),)))
