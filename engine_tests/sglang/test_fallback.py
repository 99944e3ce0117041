"""The plugin never breaks SGLang's detokenizer: requests puredetok cannot decode exactly, bad
messages and failures of puredetok itself go to SGLang's own code, logged once.

These drive SGLang's real ``DetokenizerManager`` class in this process, hooked by SGLang's own
``load_plugins`` (as SGLang's unit tests drive it: an instance with the attributes its decode
step reads, no sockets), so a failure can be injected into puredetok.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest

import puredetok.engines.sglang as plugin
from puredetok import codec_for
from puredetok.serving._codec_cache import CodecCache
from sglang_helpers import REFUSED, VERSION, decoder, exact_text, fresh_rid, needs_plugin, tokenizer
from sglang_process import Request, iterations, token_batch


def manager(name: str) -> Any:
    """SGLang's ``DetokenizerManager`` (hooked) with what its decode step reads."""
    from sglang.srt.managers.detokenizer_manager import DetokenizerManager, LimitedCapacityDict
    from sglang.srt.plugins import load_plugins

    load_plugins()
    instance = object.__new__(DetokenizerManager)
    instance.tokenizer = tokenizer(name)
    instance.vocab_size = len(instance.tokenizer)
    instance.decode_status = LimitedCapacityDict(capacity=1 << 16)
    instance.disable_tokenizer_batch_decode = False
    instance.is_tool_call_parser_gpt_oss = False
    instance.tool_close_token_ids = frozenset()
    return instance


def sglang_own(name: str, requests: list[Request]) -> dict[str, str]:
    """What SGLang's own decode step (the method under the hook) sends for these requests."""
    from sglang.srt.managers.detokenizer_manager import DetokenizerManager

    own = DetokenizerManager._decode_batch_token_id_output.__wrapped__
    return stream(manager(name), requests, lambda instance, batch: own(instance, batch))


def stream(instance: Any, requests: list[Request], decode: Any = None) -> dict[str, str]:
    """Each request's text through the manager's (hooked) decode step."""
    texts = {request.rid: "" for request in requests}
    for rows in iterations(requests):
        if rows:
            batch = token_batch(rows)
            outputs = decode(instance, batch) if decode else instance._decode_batch_token_id_output(batch)
            for row, text in zip(rows, outputs):
                texts[row.rid] += text
    return texts


@needs_plugin
def test_options_without_an_exact_codec_go_to_sglangs_own_code(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def not_exact_when_keeping_special_tokens(tokenizer: Any, **options: Any) -> Any:
        codec = codec_for(tokenizer, **options)
        return codec if options["skip_special_tokens"] else attrs.evolve(codec, exact=False, reason="a test")

    monkeypatch.setattr(plugin, "_CODECS", CodecCache(build=not_exact_when_keeping_special_tokens))
    ids = tokenizer("llama2").convert_tokens_to_ids(["<0x6B>", "<0xD2>"])
    requests = [
        Request(fresh_rid("kept"), [], ids, skip_special_tokens=False),
        Request(fresh_rid("skipped"), [], ids, skip_special_tokens=True),
        Request(fresh_rid("kept"), [], [*ids, 1], skip_special_tokens=False, per_step=2),
    ]
    instance = manager("llama2")
    with caplog.at_level(logging.WARNING, logger=plugin.__name__):
        texts = stream(instance, requests)
    assert texts[requests[1].rid] == exact_text("llama2", requests[1]) == "\ufffd\ufffd"
    own = sglang_own("llama2", [requests[0], requests[2]])
    assert [texts[requests[0].rid], texts[requests[2].rid]] == [own[requests[0].rid], own[requests[2].rid]]
    assert texts[requests[0].rid] == "k\ufffd"  # SGLang's own text, not the exact one
    assert len([record for record in caplog.records if "no exact model" in record.getMessage()]) == 1
    assert len(instance.puredetok_detokenizer) == 0 and len(instance.decode_status) == 0


@needs_plugin
def test_a_failure_of_puredetok_hands_the_request_to_sglang_mid_stream(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls = {"count": 0}
    real = plugin.feed_hold

    def failing_once(*args: Any) -> Any:
        calls["count"] += 1
        if calls["count"] == 3:
            raise RuntimeError("injected")
        return real(*args)

    monkeypatch.setattr(plugin, "feed_hold", failing_once)
    encode = tokenizer("qwen3").encode
    requests = [
        Request(fresh_rid("failing"), encode("Q: hi"), encode(" plain words, then more words."), per_step=3),
        Request(fresh_rid("other"), encode("Q: hi"), encode(" 推理 😀 ok"), per_step=3),
    ]
    with caplog.at_level(logging.WARNING, logger=plugin.__name__):
        texts = stream(manager("qwen3"), requests)
    assert texts == {request.rid: exact_text("qwen3", request) for request in requests}
    assert [record.getMessage() for record in caplog.records if "failed" in record.getMessage()] == [
        f"puredetok failed on request {requests[0].rid!r}: SGLang's own detokenizer takes it over"
    ]


@needs_plugin
def test_a_read_offset_outside_the_window_goes_to_sglangs_own_code() -> None:
    from sglang_process import Row

    instance = manager("qwen3")
    ids = tokenizer("qwen3").encode("some text")
    rows = [
        Row(fresh_rid("bad-offset"), ids, 99, {"type": "length"}),
        Row(fresh_rid("fine"), ids, 1, {"type": "length"}),
    ]
    outputs = instance._decode_batch_token_id_output(token_batch(rows))
    assert outputs == ["", decoder("qwen3")(ids[1:])]


@needs_plugin
@pytest.mark.parametrize("name", ["llama2", "qwen3"])
@pytest.mark.parametrize("per_step", [1, 2])
def test_a_failure_while_bytes_are_held_hands_them_to_sglang(
    name: str, per_step: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure of puredetok at any step, also while it holds the first bytes of a character or
    a space it has not sent yet: SGLang's own detokenizer gets the ids whose text was not sent (and
    one before them, as its context), so no text is lost and none sent twice."""
    encode = tokenizer(name).encode
    answer = encode(" 鱻䨻 word 😀 more", add_special_tokens=False)
    target = "step_hold" if per_step == 1 else "feed_hold"
    real = getattr(plugin, target)
    for failing_call in range(1, len(answer) + 1):
        calls = {"count": 0}

        def failing(*args: Any, _at: int = failing_call, _calls: dict[str, int] = calls) -> Any:
            _calls["count"] += 1
            if _calls["count"] == _at:
                raise RuntimeError("injected")
            return real(*args)

        monkeypatch.setattr(plugin, target, failing)
        request = Request(fresh_rid("held"), encode("Q:"), answer, per_step=per_step)
        texts = stream(manager(name), [request])
        assert texts[request.rid] == exact_text(name, request), failing_call


@pytest.mark.parametrize("change", ["a message field gone", "a status field gone", "a module moved"])
def test_an_sglang_the_plugin_was_not_made_for_keeps_its_own_decode(
    change: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another SGLang version's detokenizer (its messages' fields, its ``DecodeStatus``, its modules
    as SGLang could change them) keeps its own decode, with a warning naming why; this SGLang's
    is the one the plugin was made for."""
    import dataclasses
    import sys

    import msgspec
    from sglang.srt.managers import detokenizer_manager, io_struct

    instance = manager("llama2")
    assert plugin.unfit(instance) is None
    if change == "a message field gone":
        fields = [name for name in io_struct.BatchTokenIDOutput.__struct_fields__ if name != "read_offsets"]
        monkeypatch.setattr(io_struct, "BatchTokenIDOutput", msgspec.defstruct("Changed", fields))
        reason = "BatchTokenIDOutput has no read_offsets"
    elif change == "a status field gone":
        changed = dataclasses.make_dataclass("Changed", ["decoded_text", "decode_ids", "read_offset"])
        monkeypatch.setattr(detokenizer_manager, "DecodeStatus", changed)
        reason = "DecodeStatus has no surr_offset, sent_offset"
    else:
        monkeypatch.setitem(sys.modules, "sglang.srt.managers.io_struct", None)
        reason = "ModuleNotFoundError"
    assert reason in str(plugin.unfit(instance))
    caplog.clear()  # an SGLang the plugin refuses said so when manager() loaded the plugins
    with caplog.at_level(logging.WARNING, logger=plugin.__name__):
        assert plugin._make(instance) is None
    [warning] = [r.getMessage() for r in caplog.records if "not used with this SGLang" in r.getMessage()]
    assert f"sglang {VERSION}" in warning and reason in warning


def test_an_sglang_whose_detokenizer_loads_no_plugins_keeps_its_own_decode(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SGLang 0.5.21 and older start their detokenizer process without loading plugins: the
    entry point runs only in SGLang's other processes, and there it hooks nothing and says why
    (on an SGLang that loads them, a ``run_detokenizer_process`` as 0.5.21's stands in)."""
    from sglang.srt.managers import detokenizer_manager
    from sglang.srt.plugins.hook_registry import HookRegistry

    if REFUSED is None:

        def run_detokenizer_process(server_args: Any, port_args: Any) -> None:
            detokenizer_manager.DetokenizerManager(server_args, port_args).event_loop()

        monkeypatch.setattr(detokenizer_manager, "run_detokenizer_process", run_detokenizer_process)
    reason = "its detokenizer process loads no plugins"
    assert reason in str(plugin.unloaded())
    registered: list[object] = []
    monkeypatch.setattr(HookRegistry, "register", lambda *args: registered.append(args))
    monkeypatch.delenv(plugin.OFF_VARIABLE, raising=False)
    with caplog.at_level(logging.WARNING, logger=plugin.__name__):
        plugin.register()
    assert registered == []
    [warning] = [r.getMessage() for r in caplog.records if "not used with this SGLang" in r.getMessage()]
    assert f"sglang {VERSION}" in warning and reason in warning


@needs_plugin
def test_this_sglang_is_a_tested_one_and_an_untested_one_that_fits_decodes_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The SGLang these tests pass on is listed in ``TESTED_VERSIONS``; on one that is not, whose
    detokenizer is the one the plugin was made for, puredetok decodes and says the version was not
    tested."""
    assert VERSION in plugin.TESTED_VERSIONS
    instance = manager("qwen3")
    with caplog.at_level(logging.INFO, logger=plugin.__name__):
        assert plugin._make(instance) is not None
    assert [r.levelno for r in caplog.records if "decoding in SGLang's" in r.getMessage()] == [logging.INFO]
    caplog.clear()
    monkeypatch.setattr(plugin, "TESTED_VERSIONS", ("0.0.1",))
    with caplog.at_level(logging.INFO, logger=plugin.__name__):
        assert plugin._make(instance) is not None
    [warning] = [r for r in caplog.records if "decoding in SGLang's" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert f"sglang {VERSION} was not tested (0.0.1 were)" in warning.getMessage()
