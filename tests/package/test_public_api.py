"""The public face: every public name documented and the typed example consumer runs (its type
check, and the ``TokenizerLike`` protocol refusing what is not a tokenizer, are in
test_typing_user_code.py)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import queue
import threading
from pathlib import Path

import msgspec
import pytest
import tokenizers

import puredetok
import puredetok_audit
import typing_consumer
from helpers import codec, tokenizer
from puredetok.serving._messages import DetokenizeMsg
from puredetok.streamer import TextIteratorStreamer
from puredetok.testing import Guarantee
from test_api_reference import PUBLIC

SOURCE = Path(puredetok.__file__).parent
TESTS = Path(__file__).parent


def _documented(tree: ast.Module, name: str) -> bool | None:
    """Whether the top-level definition of ``name`` has a docstring (None: not defined here)."""
    body = tree.body
    for index, node in enumerate(body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return ast.get_docstring(node) is not None
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        if name in targets:
            following = body[index + 1] if index + 1 < len(body) else None
            return (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            )
    return None


MODULES = sorted(
    m.name
    for package in (puredetok, puredetok_audit)
    for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
    if not m.name.endswith("__main__")
)


def _definition(module_name: str, name: str, seen: tuple[str, ...] = ()) -> tuple[ast.Module, str]:
    """The syntax tree of the module that defines ``name`` (following ``from ... import`` from
    ``module_name``), and that module's name."""
    assert module_name not in seen, f"{name}: imported in a circle {seen}"
    module = importlib.import_module(module_name)
    tree = ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name and alias.name == name:
                    return _definition(node.module, name, (*seen, module_name))
    return tree, module_name


@pytest.mark.parametrize("module_name", MODULES)
def test_every_module_has_a_docstring(module_name: str) -> None:
    assert importlib.import_module(module_name).__doc__, f"{module_name} has no docstring"


@pytest.mark.parametrize("module_name", PUBLIC)
def test_every_public_name_is_documented(module_name: str) -> None:
    """Every name a public module lists, where it is defined (a private module, most often)."""
    undocumented = []
    module = importlib.import_module(module_name)
    for name in module.__all__:
        if isinstance(getattr(module, name), type(module)):
            continue  # a public module: its docstring is test_every_module_has_a_docstring's
        tree, home = _definition(module_name, name)
        if _documented(tree, name) is not True:
            undocumented.append(f"{name} (in {home})")
    assert not undocumented, f"{module_name}: {undocumented}"


def test_the_public_packages_export_what_the_docs_name() -> None:
    assert {"codec_for", "start", "step", "feed", "finish", "TokenizerLike"} <= set(puredetok.__all__)
    for module_name in ("puredetok.testing", "puredetok.testing.strategies", "puredetok.streamer"):
        module = importlib.import_module(module_name)
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, (module_name, missing)


def test_the_typed_consumer_runs() -> None:
    words = typing_consumer.Words(["hello", "world"])
    assert puredetok.codec_for(typing_consumer.as_tokenizer(words)).exact is False
    qwen = codec("qwen3")
    assert typing_consumer.stream(qwen, [100024, 119]) == ["", "鱻", ""]
    assert typing_consumer.stream_or_report(qwen, [100024, -1]) == (
        "\ufffd",
        "invalid token id -1: outside the vocabulary [0, 151669)",
    )
    raw = tokenizer("gpt2").backend_tokenizer
    assert isinstance(raw, tokenizers.Tokenizer)
    results = typing_consumer.conformance(raw, [6552, 234])
    assert results[0] is None
    assert results[1] is not None and results[1].guarantee is Guarantee.EAGER
    assert results[2] is not None and results[2].guarantee is Guarantee.NO_TRANSIENT_REPLACEMENT
    assert typing_consumer.id_strategy(raw).example is not None
    streamer = typing_consumer.printing_streamer(tokenizer("qwen3"), qwen)
    assert streamer.skip_prompt and streamer.codec is qwen
    iterating = TextIteratorStreamer(tokenizer("qwen3"), timeout=10, codec=qwen)

    def generate() -> None:
        iterating.put([[100024]])
        iterating.put([119])
        iterating.end()

    feeder = threading.Thread(target=generate)
    feeder.start()
    assert list(typing_consumer.iterate(iterating)) == ["", "鱻", ""]
    feeder.join()
    with pytest.raises(queue.Empty):
        iterating.text_queue.get_nowait()
    first, tokenize, user = typing_consumer.messages_from_lists(["b"], [1, 2])
    assert first.token_ids == (5, 6) and first.open is not None and first.open.prompt_ids == (1, 2)
    assert first.open.params.stop == ("a", "b") and tokenize.messages is not None
    assert type(tokenize.messages) is tuple and user.input_ids == (1, 2)
    assert hash(msgspec.structs.replace(first, open=None)) == hash(DetokenizeMsg("u", (5, 6)))  # values
