"""Codecs for new decode options: built beside the worker's loop while only their request waits
(real ``puredetok serve`` processes), derived where a rebuild is not needed, shared where options
decode identically, and kept in a bounded cache."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from helpers import codec, tokenizer
from puredetok import Codec, feed, finish, start
from puredetok.cli.serve import _codec_options, _spelled
from puredetok.core import read_vocabulary
from puredetok.serving.detokenize_manager import CodecKey, DetokenizeManager
from puredetok.serving.messages import (
    AbortBackendMsg,
    AbortMsg,
    DetokenizeMsg,
    Opening,
    SamplingParams,
    UserReply,
)
from puredetok.worker.worker import Limits, Worker
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
    refused), and the requests around it stream on."""
    from transformers import ByT5Tokenizer

    folder = tmp_path / "byt5"
    ByT5Tokenizer().save_pretrained(folder)
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


def _key(manager: DetokenizeManager, **options: object) -> CodecKey:
    return manager.codec_key(SamplingParams(**options))  # type: ignore[arg-type]


def test_the_cache_is_bounded_and_keeps_what_live_requests_use() -> None:
    kept: dict[CodecKey, Codec] = {}
    m = DetokenizeManager(tokenizer("llama2"), codecs=kept, max_codecs=2)
    default = m.codec_key(SamplingParams())
    options = [
        SamplingParams(skip_special_tokens=False, ignore_eos=True),
        SamplingParams(spaces_between_special_tokens=True, clean_up_tokenization_spaces=True),
    ]
    for n, params in enumerate(options):
        m.open(n, Opening((), params))
    assert len(kept) == 3  # three option sets in use (the default's included): none is dropped
    for n in range(len(options)):
        m.abort([n])
    m.codec(max_byte_run=3)  # one more: the least recently used ones nobody uses go
    assert list(kept) == [default, _key(m, max_byte_run=3)]
    live = m.open("live", Opening((), options[0])).codec
    assert list(kept) == [default, m.codec_key(options[0])]
    m.codec(max_byte_run=5)
    m.codec(max_byte_run=6)  # the one for 5, least recently used and unused, goes
    assert list(kept) == [default, m.codec_key(options[0]), _key(m, max_byte_run=6)]
    assert kept[m.codec_key(options[0])] is live
    ids = tuple(tokenizer("llama2").encode("an <0xF0> </s> end"))
    [reply] = m.handle([DetokenizeMsg("live", ids, True)])
    assert reply.incremental_output == tokenizer("llama2").decode(list(ids), skip_special_tokens=False)
    with pytest.raises(ValueError, match="max_codecs"):
        DetokenizeManager(tokenizer("qwen3"), max_codecs=0)


def test_options_that_decode_alike_share_one_codec() -> None:
    qwen = DetokenizeManager(tokenizer("qwen3"))
    base = qwen.codec()
    assert qwen.codec(max_byte_run=4) is base and qwen.codec(max_byte_run=9) is base  # no byte runs
    # transformers' cleanup does not apply to a BPE tokenizer (Qwen3): the same decoding.
    assert qwen.codec(True, True) is base
    llama = DetokenizeManager(tokenizer("llama2"))
    capped = llama.codec(max_byte_run=4)
    assert capped != llama.codec() and capped.decoding.fast is llama.codec().decoding.fast


def test_a_manager_handed_the_vocabulary_builds_the_same_codecs_from_it() -> None:
    """``DetokenizeManager(..., vocabulary=read_vocabulary(tokenizer))``: several managers of one
    tokenizer read its vocabulary once; the codecs they build from it are the ones built alone."""
    llama = tokenizer("llama2")
    vocabulary = read_vocabulary(llama)
    assert vocabulary is not None
    handed = DetokenizeManager(llama, vocabulary=vocabulary)
    assert handed._vocabulary is vocabulary
    assert handed.codec() == codec("llama2", True)
    assert handed.codec(False, max_byte_run=4) == DetokenizeManager(llama).codec(False, max_byte_run=4)


def test_codec_options_are_built_before_the_worker_is_ready(tmp_path: Path) -> None:
    options = _codec_options("skip_special_tokens=false, clean_up_tokenization_spaces=true,max_byte_run=4")
    assert options == SamplingParams(
        skip_special_tokens=False, clean_up_tokenization_spaces=True, max_byte_run=4
    )
    assert _codec_options(_spelled(options)) == options
    for bad in ("skip=false", "max_byte_run=x", "skip_special_tokens=none", "out_of_vocab=skip"):
        with pytest.raises(argparse.ArgumentTypeError):
            _codec_options(bad)
    worker = Worker(
        tokenizer("llama2"),
        listen=f"ipc://{tmp_path}/w",
        backend=f"ipc://{tmp_path}/b",
        frontend=f"ipc://{tmp_path}/f",
        limits=Limits(max_codecs=3),
        codec_options=[options, SamplingParams(skip_special_tokens=False)],
    )
    try:
        manager = worker.detokenize_manager
        assert manager.max_codecs == 3
        assert manager.cached_codec(manager.codec_key(SamplingParams(skip_special_tokens=False))) is not None
        assert manager.cached_codec(manager.codec_key(options)) is not None
    finally:
        worker.close()
