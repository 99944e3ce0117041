"""The one codec cache (``puredetok.serving._codec_cache``, docs/adapters.md "How codecs are
cached and shared"): built once under concurrency, bounded, keyed by the tokenizer and its options,
a failed build its answer; the manager, the worker's builder and parking, and the engine plugins
ask it. Codecs for new decode options are built beside the worker's loop while only their request
waits (real ``puredetok serve`` processes), derived where a rebuild is not needed, shared where
options decode identically."""

from __future__ import annotations

import argparse
import gc
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

import sources
import synthetic
from helpers import _folder, codec, tokenizer
from puredetok import Codec, codec_for, feed, finish, start
from puredetok._build import read_vocabulary
from puredetok.cli._serve import _codec_options, _spelled
from puredetok.errors import OptionTypeError
from puredetok.serving import _codec_cache
from puredetok.serving._codec_cache import (
    CodecCache,
    CodecOptions,
    Setting,
    exact_or_why,
    ignores_spaces_option,
)
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._loading import load_tokenizer
from puredetok.serving._messages import (
    AbortBackendMsg,
    AbortMsg,
    DetokenizeMsg,
    Opening,
    SamplingParams,
    UserReply,
)
from puredetok.worker._worker import Limits, Worker
from zmq_harness import Harness

STREAMS = [f"s{n}" for n in range(8)]
KEEP = SamplingParams(skip_special_tokens=False, ignore_eos=True)


def _text(replies: list[UserReply]) -> str:
    return "".join(reply.incremental_output for reply in replies)


def test_a_new_option_sets_first_request_stalls_no_other_stream(tmp_path: Path) -> None:
    """Eight streams go on being answered while the codec of ``skip_special_tokens=False`` is
    built: replies to messages sent *after* the new request's opening arrive before its first
    reply (the worker used to build it in its loop, answering nobody meanwhile). The new request's
    messages, sent while it waits, are answered in order and exactly."""
    qwen = tokenizer("qwen3")
    ids = list(qwen.encode("<|im_start|>assistant\nThe codec is built aside.<|im_end|>"))
    h = Harness(tmp_path)
    try:
        h.start(1, "--quiet")
        h.wait_ready(1)
        pool = h.pool([0])
        pool.send(
            [
                DetokenizeMsg(uid, (9707,), False, Opening((), SamplingParams(ignore_eos=True)))
                for uid in STREAMS
            ]
        )
        got: dict[object, list[UserReply]] = {}

        def take(count: int) -> None:
            for message in h.receive(h.frontend, lambda m: len(m) >= count):
                assert isinstance(message, UserReply) and message.error is None, message
                got.setdefault(message.uid, []).append(message)

        take(len(STREAMS))
        pool.send([DetokenizeMsg("new", tuple(ids[:3]), False, Opening((), KEEP))])
        pool.send([DetokenizeMsg("new", tuple(ids[3:]), True)])
        rounds_before = 0
        while "new" not in got:
            pool.send([DetokenizeMsg(uid, (11,)) for uid in STREAMS])
            before = sum(len(replies) for uid, replies in got.items() if uid != "new")
            while sum(len(replies) for uid, replies in got.items() if uid != "new") < before + len(STREAMS):
                take(1)
            if "new" not in got:
                rounds_before += 1
        assert rounds_before >= 2, rounds_before
        while not got["new"][-1].finished:
            take(1)
    finally:
        h.close()
    state, text = feed(start(codec("qwen3", skip=False)), ids)
    assert _text(got["new"]) == text + finish(state)
    for uid in STREAMS:
        assert _text(got[uid]) == qwen.decode([9707] + [11] * (len(got[uid]) - 1))


def test_a_codec_that_cannot_be_built_ends_only_its_request(tmp_path: Path) -> None:
    """ByT5's decode raises on ids past its vocabulary, so ``out_of_vocab="ignore"`` has no codec:
    that request ends with the error (the scheduler is told to drop it, a late message of it is
    refused), and the requests around it stream on. Without the 125 extra ids: transformers 5.0
    recomputes the special ids at every id its decode skips, and the worker's build-time check took
    80 - 160 s to decode with the 128 special tokens there (docs/versions.md)."""
    from transformers import ByT5Tokenizer

    folder = tmp_path / "byt5"
    ByT5Tokenizer(extra_ids=0).save_pretrained(folder)
    h = Harness(tmp_path)
    try:
        h.start(1, "--quiet", "--tokenizer", str(folder))
        h.wait_ready(1)
        pool = h.pool([0])
        hi = tuple(b + 3 for b in b"hi")
        pool.send([DetokenizeMsg("bad", hi, False, Opening((), SamplingParams(out_of_vocab="ignore")))])
        pool.send([DetokenizeMsg("ok", hi, False, Opening()), DetokenizeMsg("bad", hi)])
        pool.send([DetokenizeMsg("ok", hi, True)])
        replies = h.replies_until_finished({"ok", "bad"})
        assert _text(replies["ok"]) == "hihi" and replies["ok"][-1].error is None
        [bad] = replies["bad"]
        assert bad.finished and bad.error is not None and "could not be built" in bad.error
        assert "out_of_vocab='ignore'" in bad.error
        aborts = h.receive(h.backend, lambda got: any(isinstance(m, AbortBackendMsg) for m in got))
        assert [m.uid for m in aborts if isinstance(m, AbortBackendMsg)] == ["bad"]
        pool.send([DetokenizeMsg("bad", hi, True)])
        [late] = h.receive(h.frontend, lambda got: len(got) >= 1)
        assert isinstance(late, UserReply) and late.error is not None and "already ended" in late.error
        assert not late.finished  # its one finished reply was the refusal (the lifecycle rule)
    finally:
        h.close()


def test_an_abort_while_the_codec_is_built_ends_the_request_once(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    try:
        h.start(1, "--quiet")
        h.wait_ready(1)
        pool = h.pool([0])
        pool.send([DetokenizeMsg("gone", (9707,), False, Opening((), KEEP))])
        pool.send([AbortMsg("gone")])
        [reply] = h.replies_until_finished({"gone"})["gone"]
        assert reply.finish_reason == "abort" and reply.error is None and reply.incremental_output == ""
        assert not h.frontend.poll(1500)  # the codec built later answers nothing more for it
    finally:
        h.close()


class Tok:
    """A stand-in tokenizer for the builds below (they make codecs without reading it)."""


class Builds:
    """A build that counts its calls per options and makes a new codec (equal to no other) each time;
    the options for which ``blocked`` says so wait for :attr:`gate` first."""

    def __init__(self, blocked: Any = lambda options: False, fails: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.blocked = blocked
        self.fails = fails
        self.gate = threading.Event()
        self.started = threading.Event()

    def __call__(self, tokenizer: Any, **options: Any) -> Codec:
        self.calls.append(options)
        made = f"made {len(self.calls)}"
        if self.blocked(options):
            self.started.set()
            assert self.gate.wait(60)
        if self.fails:
            raise ValueError(f"no codec for {options['skip_special_tokens']}")
        return codec("gpt2").sharing(fingerprint=made)


def _counted() -> tuple[type[Any], list[threading.Thread]]:
    """A ``_Build`` whose waiters are listed, and their list."""

    class Counted(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waiters.append(threading.current_thread())
            return super().wait(timeout)

    class Build(_codec_cache._Build):
        def __init__(self) -> None:
            super().__init__()
            self.done = Counted()

    waiters: list[threading.Thread] = []
    return Build, waiters


def test_threads_asking_for_one_codec_wait_for_its_one_build_while_others_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    build = Builds(blocked=lambda options: not options["skip_special_tokens"])
    counted, waiters = _counted()
    monkeypatch.setattr(_codec_cache, "_Build", counted)
    cache, tok, keep = CodecCache(build=build), Tok(), CodecOptions(skip_special_tokens=False)
    got: dict[int, Codec] = {}

    def ask(n: int) -> None:
        got[n] = cache.codec(tok, keep)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(3)]
    threads[0].start()
    assert build.started.wait(60)  # the first asker builds it, and is held in its build
    for thread in threads[1:]:
        thread.start()
    deadline = time.monotonic() + 60
    while len(waiters) < 2:  # the two others wait for that build
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not cache.ready(tok, keep)
    other = cache.codec(tok, CodecOptions())  # another key builds meanwhile, not blocked
    assert cache.ready(tok, CodecOptions()) and not got
    build.gate.set()
    for thread in threads:
        thread.join(60)
    assert got[0] is got[1] is got[2] is cache.codec(tok, keep) and got[0] is not other
    assert [call["skip_special_tokens"] for call in build.calls] == [False, True]


def test_a_failed_build_is_its_answer_and_is_not_built_again() -> None:
    build = Builds(fails=True)
    cache, tok = CodecCache(build=build), Tok()
    for _ in range(3):
        with pytest.raises(ValueError, match="no codec for True"):
            cache.codec(tok, CodecOptions())
    assert isinstance(cache.built(tok, CodecOptions()), ValueError) and cache.ready(tok, CodecOptions())
    assert len(build.calls) == 1
    assert exact_or_why(cache.built(tok, CodecOptions())) == (None, "ValueError: no codec for True")


def test_a_build_out_of_memory_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not an answer of the options: the next request builds it again (a waiter asks again)."""
    calls = []

    def build(tokenizer: Any, **options: Any) -> Codec:
        calls.append(options)
        if len(calls) == 1:
            raise MemoryError
        return codec("gpt2")

    cache, tok = CodecCache(build=build), Tok()
    with pytest.raises(MemoryError):
        cache.codec(tok, CodecOptions())
    assert not cache.ready(tok, CodecOptions()) and not cache._building
    assert cache.codec(tok, CodecOptions()) is codec("gpt2") and len(calls) == 2


def test_the_cache_keeps_no_tokenizer_alive() -> None:
    build = Builds()
    cache, tok = CodecCache(build=build), Tok()
    held = cache.codec(tok, CodecOptions())
    gone = weakref.ref(tok)
    del tok
    gc.collect()
    assert gone() is None and held in cache.kept()
    again = Tok()  # maybe at the same address: its own codecs
    assert cache.codec(again, CodecOptions()) is not held and len(build.calls) == 2


def test_spaces_between_special_tokens_is_left_out_where_decode_ignores_it() -> None:
    """The rule lives in the cache alone: a transformers class over the tokenizers backend and a raw
    ``tokenizers.Tokenizer`` ignore the option (one codec for its three values), a class that
    overrides decode or acts on it (Wav2Vec2's CTC) does not."""
    assert ignores_spaces_option(tokenizer("qwen3")) and ignores_spaces_option(synthetic.no_decoder())
    assert not ignores_spaces_option(sources.overriding_decode("gpt2").tokenizer)
    from test_engine_params import ctc_tokenizer

    assert not ignores_spaces_option(ctc_tokenizer()) and not ignores_spaces_option(Tok())
    for tok, builds in ((tokenizer("qwen3"), 1), (Tok(), 3)):
        build = Builds()
        cache = CodecCache(build=build)
        got = {
            cache.codec(tok, CodecOptions(spaces_between_special_tokens=spaces))
            for spaces in (None, True, False)
        }
        assert len(build.calls) == len(got) == builds
        assert all(call["spaces_between_special_tokens"] is None for call in build.calls) is (builds == 1)


def test_the_cache_is_bounded_and_finds_what_live_requests_hold() -> None:
    """At most ``max_codecs`` entries are kept; a codec a live request uses is found again without a
    build, and one nobody holds any more is gone (a manager's records before their first token hold
    no codec the cache dropped)."""
    llama = tokenizer("llama2")
    built: list[dict[str, Any]] = []

    def build(tok: Any, **options: Any) -> Codec:
        built.append(options)
        return codec_for(tok, **options)

    cache = CodecCache(2, build=build)
    m = DetokenizeManager(llama, codecs=cache)
    options = [
        SamplingParams(skip_special_tokens=False, ignore_eos=True),
        SamplingParams(out_of_vocab="ignore"),
    ]
    used = [m.open(n, Opening((), params)).codec for n, params in enumerate(options)]
    assert len(cache) == 2 and len(built) == 3  # the default's, and one for each (none alike)
    assert all(m.codec_of(params) is codec for params, codec in zip(options, used)) and len(built) == 3
    gone = weakref.ref(used[1])
    m.abort([1])
    del used[1]
    for cap in (3, 5, 6):  # derived, not built: the least recently used entries go
        m.open(f"cap {cap}", Opening((), SamplingParams(max_byte_run=cap)))
    gc.collect()
    assert gone() is None and len(cache) == 2 and len(built) == 3 and cache.evictions >= 3
    assert m.codec_of(options[0]) is used[0] and len(built) == 3  # still held by request 0
    ids = tuple(llama.encode("an <0xF0> </s> end"))
    [reply] = m.handle([DetokenizeMsg(0, ids, True)])
    assert reply.incremental_output == llama.decode(list(ids), skip_special_tokens=False)
    m.codec_of(options[1])
    assert len(built) == 4  # dropped and held by nobody: built again
    with pytest.raises(ValueError, match="max_codecs"):
        DetokenizeManager(tokenizer("qwen3"), max_codecs=0)


def test_options_that_decode_alike_share_one_codec() -> None:
    qwen = DetokenizeManager(tokenizer("qwen3"))
    base = qwen.codec()
    assert qwen.codec(max_byte_run=4) is base and qwen.codec(max_byte_run=9) is base  # no byte runs
    # transformers 5.7 and later skip the cleanup on a BPE tokenizer (Qwen3): the same decoding
    # and codec; earlier 5.x releases clean, so the cleaning codec is another one
    probe = tokenizer("qwen3").encode("Hi . I 'm ok", add_special_tokens=False)
    cleans = tokenizer("qwen3").decode(probe, clean_up_tokenization_spaces=True) != tokenizer("qwen3").decode(
        probe, clean_up_tokenization_spaces=False
    )
    assert (qwen.codec(True, True) is base) is not cleans
    llama = DetokenizeManager(tokenizer("llama2"))
    capped = llama.codec(max_byte_run=4)
    assert capped != llama.codec() and capped.decoding.fast is llama.codec().decoding.fast


def test_a_fallback_codec_is_shared_by_its_own_tokenizer_only() -> None:
    """Equal codecs are one object, but a fallback calls its tokenizer's ``decode``: two objects of
    a class puredetok does not model get a fallback each, one of each decoding with its own; two
    loads of one tokenizer share their exact codec."""
    from transformers import PreTrainedTokenizerFast

    class OverridingDecode(PreTrainedTokenizerFast):  # type: ignore[misc]
        def decode(self, *args: Any, **kwargs: Any) -> Any:
            return PreTrainedTokenizerFast.decode(self, *args, **kwargs)

    backend = tokenizer("qwen3").backend_tokenizer
    first, second = (OverridingDecode(tokenizer_object=backend.from_str(backend.to_str())) for _ in "ab")
    cache = CodecCache()
    one, other = cache.codec(first, CodecOptions()), cache.codec(second, CodecOptions())
    assert not one.exact and one == other and one is not other
    assert cache.codec(first, CodecOptions(max_byte_run=4)) is one  # its own options still share it
    exact = cache.codec(tokenizer("qwen3"), CodecOptions())
    again = load_tokenizer(_folder("qwen3"))
    assert cache.codec(again, CodecOptions()) is exact


def test_a_manager_handed_the_vocabulary_builds_the_same_codecs_from_it() -> None:
    """``DetokenizeManager(..., vocabulary=read_vocabulary(tokenizer))``: several managers of one
    tokenizer read its vocabulary once; the codecs they build from it are the ones built alone."""
    llama = tokenizer("llama2")
    vocabulary = read_vocabulary(llama)
    assert vocabulary is not None
    given: list[object] = []

    def build(tok: Any, **options: Any) -> Codec:
        given.append(options.get("vocabulary"))
        return codec_for(tok, **options)

    handed = DetokenizeManager(llama, vocabulary=vocabulary, codecs=CodecCache(build=build))
    assert handed.codec() == codec("llama2", True)
    assert handed.codec(False, max_byte_run=4) == DetokenizeManager(llama).codec(False, max_byte_run=4)
    assert len(given) == 2 and all(read is vocabulary for read in given)


def test_bad_options_and_caches_get_clear_errors() -> None:
    with pytest.raises(OptionTypeError, match="skip_special_tokens"):
        CodecOptions(skip_special_tokens="false")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_byte_run"):
        CodecOptions(max_byte_run=0)
    with pytest.raises(ValueError, match="out_of_vocab"):
        CodecOptions(out_of_vocab="skip")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_byte_run"):
        Setting().options(max_byte_run=-1)
    assert Setting(8).options(max_byte_run=0).max_byte_run is None  # 0: no cap, whatever the setting
    assert Setting(8, "ignore").options_of(SamplingParams()) == CodecOptions(
        max_byte_run=8, out_of_vocab="ignore"
    )
    with pytest.raises(ValueError, match="max_codecs"):
        CodecCache(0)
    qwen = DetokenizeManager(tokenizer("qwen3"))
    with pytest.raises(TypeError, match="codecs must be"):
        DetokenizeManager(tokenizer("qwen3"), codecs={})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_codecs bounds the cache a manager makes"):
        DetokenizeManager(tokenizer("qwen3"), codecs=qwen.codecs, max_codecs=3)
    with pytest.raises(OptionTypeError, match="clean_up_tokenization_spaces"):
        qwen.codec(True, "yes")  # type: ignore[arg-type]
    assert len(qwen.codecs) == 1  # nothing kept for a bad option


def test_what_the_engine_plugins_take_of_a_codec() -> None:
    exact = codec("qwen3")
    window = codec_for(tokenizer("qwen3"), window=True)
    assert exact_or_why(exact) == (exact, "")
    assert exact_or_why(window) == (None, window.reason) and window.reason


def test_codec_options_are_built_before_the_worker_is_ready(tmp_path: Path) -> None:
    options = _codec_options("skip_special_tokens=false, clean_up_tokenization_spaces=true,max_byte_run=4")
    assert options == SamplingParams(
        skip_special_tokens=False, clean_up_tokenization_spaces=True, max_byte_run=4
    )
    assert _codec_options(_spelled(options)) == options
    for bad in ("skip=false", "max_byte_run=x", "skip_special_tokens=none", "out_of_vocab=skip"):
        with pytest.raises(argparse.ArgumentTypeError):
            _codec_options(bad)
    llama = tokenizer("llama2")
    worker = Worker(
        llama,
        listen=f"ipc://{tmp_path}/w",
        backend=f"ipc://{tmp_path}/b",
        frontend=f"ipc://{tmp_path}/f",
        limits=Limits(max_codecs=3),
        codec_options=[options, SamplingParams(skip_special_tokens=False)],
    )
    try:
        codecs = worker.detokenize_manager.codecs
        assert worker.detokenize_manager.max_codecs == codecs.max_codecs == 3 and len(codecs) == 3
        assert codecs.ready(llama, CodecOptions(skip_special_tokens=False))
        assert codecs.ready(llama, Setting().options_of(options))
        assert codecs is worker._codecs  # the one cache its parking and builder ask
    finally:
        worker.close()
