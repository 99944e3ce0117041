"""The plugin on the vLLM versions around the pinned one (``python3 tasks.py test-engines
vllm==VERSION``): it hooks a version whose classes are the ones it was made for, says when that
version was not tested, and leaves one whose methods vLLM calls differently alone."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import msgspec
import numpy as np
import pytest
from vllm.v1.engine.detokenizer import IncrementalDetokenizer
from vllm.v1.engine.output_processor import OutputProcessor

import puredetok.engines.vllm as plugin
from driver import request, vllm_tokenizer
from test_plugin import expected


@pytest.fixture
def unregistered() -> Iterator[None]:
    """Within: the plugin unregistered (each test registers it again as it needs), then back."""
    plugin.unregister()
    try:
        yield
    finally:
        plugin.unregister()
        plugin.register()
        assert plugin.registered()


def test_this_vllm_is_a_tested_one_and_the_plugin_hooks_it() -> None:
    """The vLLM these tests run in is listed in ``TESTED_VERSIONS`` (a version the tests pass on is
    added there) and passes ``unfit``: the plugin hooks it."""
    assert version("vllm") in plugin.TESTED_VERSIONS
    assert plugin.unfit(IncrementalDetokenizer, OutputProcessor) is None
    assert plugin.registered()


def test_a_vllm_version_not_tested_is_hooked_and_says_so(
    unregistered: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a version not in ``TESTED_VERSIONS`` whose classes are the ones the plugin was made for,
    the plugin is used, and its warning names the version and the tested ones."""
    monkeypatch.setattr(plugin, "TESTED_VERSIONS", ("0.0.1",))
    with caplog.at_level("INFO", logger="vllm.puredetok"):
        plugin.register()
    assert plugin.registered()
    [line] = [r for r in caplog.records if "detokenizes with puredetok" in r.getMessage()]
    assert line.levelname == "WARNING"
    assert f"vllm {version('vllm')} was not tested (0.0.1 were)" in line.getMessage()
    detokenizer = IncrementalDetokenizer.from_new_request(vllm_tokenizer("qwen3"), request([9707]))
    assert isinstance(detokenizer, plugin.PuredetokDetokenizer)


def test_a_tested_vllm_version_is_hooked_quietly(
    unregistered: None, caplog: pytest.LogCaptureFixture
) -> None:
    """On a tested version the plugin says it is on at ``INFO``, and warns of nothing."""
    with caplog.at_level("INFO", logger="vllm.puredetok"):
        plugin.register()
    assert plugin.registered()
    [line] = [r for r in caplog.records if "detokenizes with puredetok" in r.getMessage()]
    assert line.levelname == "INFO" and "not tested" not in line.getMessage()


def _update(self: Any, new_token_ids: list[int], stop_terminated: bool, logprobs: Any = None) -> None:
    raise AssertionError("not called")


def _next_text(self: Any, finished: bool) -> str:
    raise AssertionError("not called")


@pytest.mark.parametrize(
    ("member", "value", "reason"),
    [
        (
            "update",
            _update,
            "IncrementalDetokenizer.update takes (new_token_ids, stop_terminated, logprobs),"
            " not (new_token_ids, stop_terminated)",
        ),
        ("get_next_output_text", _next_text, "get_next_output_text takes (finished), not (finished, delta)"),
        ("num_output_tokens", property(lambda self: 0), "num_output_tokens is not a method"),
        ("output_token_ids", lambda self: [], "IncrementalDetokenizer.output_token_ids is not a property"),
    ],
)
def test_a_vllm_calling_the_detokenizer_otherwise_keeps_its_own(
    member: str,
    value: Any,
    reason: str,
    unregistered: None,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A vLLM whose ``IncrementalDetokenizer`` has the same members but calls one with other
    parameters (or has a method where a property was, or the other way) would call the plugin's
    detokenizer wrongly, in the middle of its output loop: the plugin leaves it alone, saying why."""
    monkeypatch.setattr(IncrementalDetokenizer, member, value)
    assert plugin.unfit(IncrementalDetokenizer, OutputProcessor) is not None
    with caplog.at_level("WARNING", logger="vllm.puredetok"):
        plugin.register()
    assert not plugin.registered()
    [warning] = [r.getMessage() for r in caplog.records if "not used with this vLLM" in r.getMessage()]
    assert reason in warning and f"vllm {version('vllm')}" in warning
    detokenizer = IncrementalDetokenizer.from_new_request(vllm_tokenizer("qwen3"), request([9707]))
    assert not isinstance(detokenizer, plugin.PuredetokDetokenizer)


def test_a_prompt_as_a_numpy_array_gets_puredetok_and_the_exact_text() -> None:
    """From vLLM 0.34 on, ``EngineCoreRequest.prompt_token_ids`` may be an int32 NumPy array (vLLM
    sends the engine core a copy of the request so): such a request still gets puredetok's
    detokenizer (not vLLM's own, which a failed opening would give it) and contract C's text."""
    tokenizer = vllm_tokenizer("qwen3")
    full = tokenizer.encode("Hello world 🌶 is spicy")
    prompt, output = full[:3], full[3:]
    packed = msgspec.structs.replace(request(prompt), prompt_token_ids=np.array(prompt, dtype=np.int32))
    detokenizer = IncrementalDetokenizer.from_new_request(tokenizer, packed)
    assert isinstance(detokenizer, plugin.PuredetokDetokenizer)
    assert detokenizer.update(output, False) is None
    assert detokenizer.get_next_output_text(True, False) == expected("qwen3", prompt, output, True)
    assert expected("qwen3", prompt, output, True) == "🌶 is spicy"
