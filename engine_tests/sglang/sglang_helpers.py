"""Helpers of the SGLang engine tests: model folders, SGLang's tokenizers, its detokenizer
processes (one per tokenizer and environment, started once per session), the exact text, and
the differences between the SGLang versions the tests run on (:data:`REFUSED`,
:data:`ROUTES_BY_RID`).
"""

from __future__ import annotations

import importlib.metadata
import itertools
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from puredetok._core import continuation_text
from puredetok.engines.sglang import unloaded
from puredetok.serving._loading import default_tokenizer_path
from sglang_process import PROMPT_WINDOW, DetokenizerProcess, Request, model_folder

VERSION = importlib.metadata.version("sglang")
"""The SGLang these tests run on (``python3 tasks.py test-engines sglang==VERSION`` for another)."""

REFUSED = unloaded()
"""Why the plugin leaves this SGLang alone (None: it decodes in SGLang's detokenizer process):
SGLang 0.5.21 and older start that process without loading plugins. There, every detokenizer
decodes with SGLang's own code, which the tests that need the plugin say by being skipped, and
``test_an_sglang_whose_detokenizer_loads_no_plugins_keeps_its_own_decode`` checks."""

ROUTES_BY_RID = hasattr(
    importlib.import_module("sglang.srt.managers.multi_tokenizer_mixin").MultiDetokenizerRouter, "_pick_for"
)
"""Whether SGLang's ``MultiDetokenizerRouter`` sends a request no tokenizer worker stamped by its
id (0.5.23; 0.5.22 and older need every request stamped, as SGLang stamps them only with several
tokenizer workers)."""

needs_plugin = pytest.mark.skipif(
    REFUSED is not None, reason=f"sglang {VERSION}: the plugin refuses it ({REFUSED}); SGLang's own decodes"
)
"""The mark of a test of what the plugin does in SGLang's detokenizer."""

TOKENIZERS = Path(__file__).resolve().parents[2] / "tests" / "data" / "tokenizers"
"""The real tokenizers of the main test suite."""

OFF = {"PUREDETOK_SGLANG": "0"}
"""The environment that turns puredetok's plugin off with our variable."""
ALLOW_OTHERS = {"SGLANG_PLUGINS": "smg-zmq"}
"""The environment that leaves puredetok out through SGLang's own allow-list."""

_FOLDERS: dict[str, Path] = {}
_SCRATCH = tempfile.TemporaryDirectory(prefix="puredetok-sglang-")


def folder(name: str) -> Path:
    """The model folder of tokenizer ``name`` (tokenizer files and a small config.json)."""
    if name not in _FOLDERS:
        source = default_tokenizer_path() if name == "qwen3" else TOKENIZERS / name
        _FOLDERS[name] = model_folder(source, Path(_SCRATCH.name) / name, 200_000)
    return _FOLDERS[name]


_TOKENIZERS: dict[str, Any] = {}


def tokenizer(name: str) -> Any:
    """The tokenizer SGLang loads from that folder (its own ``get_tokenizer``)."""
    if name not in _TOKENIZERS:
        from sglang.srt.utils.hf_transformers_utils import get_tokenizer

        _TOKENIZERS[name] = get_tokenizer(str(folder(name)))
    return _TOKENIZERS[name]


_PROCESSES: dict[tuple[str, tuple[tuple[str, str], ...]], DetokenizerProcess] = {}


def detokenizer(name: str, environment: dict[str, str] | None = None) -> DetokenizerProcess:
    """SGLang's detokenizer process over tokenizer ``name`` (started once per session)."""
    key = (name, tuple(sorted((environment or {}).items())))
    process = _PROCESSES.get(key)
    if process is None or not process.process.is_alive():
        process = _PROCESSES[key] = DetokenizerProcess(folder(name), environment)
    return process


def close_all() -> None:
    """End every process started here and remove the model folders."""
    for process in _PROCESSES.values():
        process.close()
    _PROCESSES.clear()
    _SCRATCH.cleanup()


_RIDS = itertools.count()


def fresh_rid(prefix: str = "r") -> str:
    """A request id never used before in this session."""
    return f"{prefix}-{next(_RIDS)}"


def decoder(
    name: str, skip_special_tokens: bool = True, spaces: bool = True
) -> Callable[[Sequence[int]], str]:
    """``tokenizer.decode`` with these options."""
    tok = tokenizer(name)

    def decode(ids: Sequence[int]) -> str:
        return str(
            tok.decode(
                list(ids), skip_special_tokens=skip_special_tokens, spaces_between_special_tokens=spaces
            )
        )

    return decode


def exact_text(name: str, request: Request) -> str:
    """Contract C: the text of ``request`` after the prompt ids SGLang's scheduler sends
    (the last five), with the request's decode options.
    """
    decode = decoder(name, request.skip_special_tokens, request.spaces_between_special_tokens)
    window = list(request.prompt[-PROMPT_WINDOW:])
    return continuation_text(decode(window), decode(window + list(request.output)))
