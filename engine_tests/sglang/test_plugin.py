"""The plugin as SGLang loads it: its entry point, the hooks it sets, the two off switches (SGLang's
allow-list and ours, each proven in a real detokenizer process), and a request SGLang's own
detokenizer gets wrong that its process now gets right.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from puredetok.engines.sglang import DECODE_TARGET, INIT_TARGET, OFF_VARIABLE, enabled
from sglang_helpers import (
    ALLOW_OTHERS,
    OFF,
    REFUSED,
    decoder,
    detokenizer,
    fresh_rid,
    needs_plugin,
    tokenizer,
)
from sglang_process import Request, Row


def test_the_entry_point_is_in_sglangs_plugin_group() -> None:
    [point] = [point for point in entry_points(group="sglang.srt.plugins") if point.name == "puredetok"]
    assert point.value == "puredetok.engines.sglang:register"
    assert DECODE_TARGET.endswith("DetokenizerManager._decode_batch_token_id_output")
    assert INIT_TARGET.endswith("DetokenizerManager.init_running_status")


@needs_plugin
def test_sglangs_own_loader_runs_the_plugin_and_hooks_the_manager() -> None:
    from sglang.srt.managers.detokenizer_manager import DetokenizerManager
    from sglang.srt.plugins import load_plugins

    load_plugins()  # SGLang's loader, as run_detokenizer_process calls it (idempotent)
    for name in ("_decode_batch_token_id_output", "init_running_status"):
        method = getattr(DetokenizerManager, name)
        assert method.__wrapped__ is not None, name


@pytest.mark.parametrize(
    ("value", "on"),
    [
        (None, True),
        ("", True),
        ("1", True),
        ("yes", True),
        ("0", False),
        ("Off", False),
        (" false ", False),
        ("NO", False),
    ],
)
def test_our_variable_turns_the_plugin_off(
    monkeypatch: pytest.MonkeyPatch, value: str | None, on: bool
) -> None:
    if value is None:
        monkeypatch.delenv(OFF_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(OFF_VARIABLE, value)
    assert enabled() is on


# Two byte tokens of Llama-2: "k" then a lone lead byte. A byte run decodes as a whole, so the
# invalid run is two U+FFFD; SGLang's own detokenizer sends the "k" before it sees the run.
BYTE_RUN = ("<0x6B>", "<0xD2>")


def test_a_request_sglang_gets_wrong_is_right_with_the_plugin_and_wrong_without() -> None:
    ids = tokenizer("llama2").convert_tokens_to_ids(list(BYTE_RUN))
    exact = decoder("llama2")(ids)
    assert exact == "\ufffd\ufffd"
    texts = {}
    for label, environment in (("on", {}), ("off", OFF), ("allow-list", ALLOW_OTHERS)):
        rid = fresh_rid("byte-run")
        texts[label] = detokenizer("llama2", environment).run([Request(rid, [], ids)])[rid]
    on = exact if REFUSED is None else "k\ufffd"  # SGLang's own, in an SGLang the plugin refuses
    assert texts == {"on": on, "off": "k\ufffd", "allow-list": "k\ufffd"}


def test_an_idle_batch_gets_an_empty_reply() -> None:
    process = detokenizer("qwen3")
    assert process.exchange([]) == []
    rid = fresh_rid()
    assert process.exchange([Row(rid, [40, 1079], 1, {"type": "length"})]) == [decoder("qwen3")([1079])]
