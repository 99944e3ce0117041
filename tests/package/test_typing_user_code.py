"""User code type-checks under ``mypy --strict`` as another project runs it: outside the repository,
with a clean configuration, ``transformers``, ``tokenizers``, mistral-common and the others followed
through their own types, and puredetok installed with its ``py.typed`` (a copy of the package under
test in the site-packages of a scratch environment).

Checked there, in one run: the README's and the docs' calls (tests/package/typing_readme.py:
``codec_for(AutoTokenizer.from_pretrained(...))``, the stop layer, every kind of tokenizer object,
the managers, the streamers, the kit), the public API (tests/package/typing_consumer.py), the serving side
(tests/package/typing_serving.py: the manager, both clients, aborts with a list), every tokenizer class the
installed ``transformers`` exports given to each public entry point that takes a tokenizer, and the
mistakes the types exist to catch, which must be refused: ``abort("xy")`` (which iterated the
string), ``abort(b"xy")``, a list given where one uid goes, a loaded tokenizer used as something
else, and objects that are not tokenizers.

``python3 tasks.py test-oldest`` runs it again on the oldest releases the ranges allow.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import venv
from pathlib import Path

import pytest
import tokenizers
import transformers

import puredetok
import typing_readme
import typing_serving
from helpers import tokenizer

TESTS = Path(__file__).parent
SAMPLES = ("typing_readme.py", "typing_consumer.py", "typing_serving.py")

MISUSE = """
import puredetok
from puredetok.client import FrontendClient
from puredetok.serving._detokenize_manager import DetokenizeManager
from puredetok.serving._loading import load_tokenizer
from puredetok.streamer import TextStreamer

def misuse(manager: DetokenizeManager, client: FrontendClient) -> None:
    manager.abort("xy")
    manager.abort(b"xy")
    client.abort(["x"])
    count: int = load_tokenizer()
    puredetok.codec_for(42)
    puredetok.codec_for("qwen3")
    puredetok.codec_for(b"qwen3")
    TextStreamer(object())
"""
MISUSE_LINES = {
    9: 'incompatible type "str"',
    10: 'incompatible type "bytes"',
    11: 'incompatible type "list[str]"',
    12: 'has type "LoadedTokenizer"',
    13: 'expected "TokenizerLike"',
    14: 'expected "TokenizerLike"',
    15: 'expected "TokenizerLike"',
    16: 'expected "TokenizerLike"',
}


@functools.cache
def tokenizer_classes() -> tuple[str, ...]:
    """Every tokenizer class the installed ``transformers`` exports, by the module that defines it
    (97 in 5.0.0, 102 in 5.25; some are exported under two names)."""
    names = set()
    for name in dir(transformers):
        if name.endswith(("Tokenizer", "TokenizerFast", "Backend")):
            value = getattr(transformers, name)
            if isinstance(value, type) and issubclass(value, transformers.PreTrainedTokenizerBase):
                names.add(f"{value.__module__}.{value.__qualname__}")
    return tuple(sorted(names))


def classes_sample() -> str:
    """A function per class that gives such a tokenizer to each entry point that takes one."""
    lines = [
        f"import {module}" for module in sorted({name.rpartition(".")[0] for name in tokenizer_classes()})
    ]
    lines += [
        "from puredetok import Codec, codec_for",
        "from puredetok.streamer import TextStreamer",
        "from puredetok.testing import reference_for",
        "from puredetok.testing.strategies import Vocabulary",
    ]
    for index, name in enumerate(tokenizer_classes()):
        lines += [
            "",
            f"def use_{index}(tokenizer: {name}) -> Codec:",
            "    TextStreamer(tokenizer)",
            "    Vocabulary.of(tokenizer)",
            "    return reference_for(tokenizer, codec=codec_for(tokenizer)).codec",
        ]
    return "\n".join(lines) + "\n"


def outside_run(scratch: Path) -> tuple[int, list[str]]:
    """mypy's exit status and error lines on the samples, run from ``scratch``."""
    env_dir = scratch / "env"
    venv.create(env_dir, with_pip=False, symlinks=os.name != "nt")
    python = env_dir / ("Scripts" if os.name == "nt" else "bin") / Path(sys.executable).name
    query = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(
        subprocess.run([python, "-c", query], capture_output=True, text=True, check=True).stdout.strip()
    )
    package = Path(puredetok.__file__).parent
    assert (package / "py.typed").is_file()
    shutil.copytree(package, site / "puredetok", ignore=shutil.ignore_patterns("__pycache__", "data"))
    # Every other package comes from the environment running the tests (found, not installed).
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    code = scratch / "code"
    code.mkdir()
    for sample in SAMPLES:
        shutil.copy(TESTS / sample, code / sample)
    (code / "every_tokenizer_class.py").write_text(classes_sample())
    (code / "misuse.py").write_text(textwrap.dedent(MISUSE))
    config = "[mypy]\nstrict = True\n"
    if not (Path(tokenizers.__file__).parent / "py.typed").exists():
        # tokenizers 0.22 ships stubs without the py.typed marker: its users say so (docs/versions.md)
        config += "\n[mypy-tokenizers.*]\nignore_missing_imports = True\n"
    (code / "mypy.ini").write_text(config)
    clean = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "MYPYPATH")}
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--python-executable",
        str(python),
        "--cache-dir",
        str(scratch / "cache"),
    ]
    files = [*SAMPLES, "every_tokenizer_class.py", "misuse.py"]
    done = subprocess.run(command + files, cwd=code, env=clean, capture_output=True, text=True, timeout=900)
    return done.returncode, [line for line in done.stdout.splitlines() if ": error:" in line]


@pytest.fixture(scope="module")
def mypy_outside(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[str]]:
    return outside_run(tmp_path_factory.mktemp("user-code"))


def test_mypy_strict_accepts_user_code_outside_the_repository(mypy_outside: tuple[int, list[str]]) -> None:
    status, errors = mypy_outside
    assert status == 1  # the misuse sample
    assert [line for line in errors if not line.startswith("misuse.py:")] == []


def test_mypy_strict_refuses_the_mistakes(mypy_outside: tuple[int, list[str]]) -> None:
    _, errors = mypy_outside
    found = {int(line.split(":")[1]): line for line in errors if line.startswith("misuse.py:")}
    assert sorted(found) == sorted(MISUSE_LINES), "\n".join(errors)
    for line, expected in MISUSE_LINES.items():
        assert expected in found[line], found[line]


def test_every_tokenizer_class_is_in_the_sample() -> None:
    names = {name.rpartition(".")[2] for name in tokenizer_classes()}
    assert len(names) >= 90
    assert {
        "TokenizersBackend",
        "SentencePieceBackend",
        "MistralCommonBackend",
        "WhisperTokenizer",
    } <= names
    sample = classes_sample()
    assert all(f"(tokenizer: {name}) -> Codec:" in sample for name in tokenizer_classes())


def test_the_serving_sample_runs() -> None:
    assert typing_serving.detokenize_and_abort() == ["Hello, world", "*", ""]  # id 9 is "*"


def test_the_readme_sample_runs() -> None:
    path = str(tokenizer("qwen3").name_or_path)
    ids = tokenizer("qwen3").encode("Hi!\n\nUser: more", add_special_tokens=False)
    sent: list[str] = []
    typing_readme.readme_first_call(path, [], ids, sent.append)
    assert "".join(sent) == "Hi!\n\nUser: more"
    text, reason = typing_readme.readme_stops(path, [], ids)
    assert text == "Hi!" and reason is not None and reason.kind == "stop"
    assert typing_readme.conformance(path, ids)
    detokenize, _ = typing_readme.managers(path)
    assert typing_readme.as_tokenizer_like(path).decode([9]) == "*"
