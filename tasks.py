#!/usr/bin/env python3
"""Project tasks with nothing but Python 3.11 and pip:
``python3 tasks.py demo|test|bench|docs|test-engines|test-oldest``.

Each task first makes sure ``.venv`` exists with the project installed: ``demo`` and ``bench``
install the package alone (what a user gets), ``test`` and ``docs`` add the dev extras (type
checker, linter, docs builder, test tools). It reinstalls when pyproject.toml changes; pip gives
it the newest release each range allows. ``test-oldest`` runs the tests on the oldest ones.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
AUDIT = ROOT / "puredetok-audit"
"""The offline checkers' distribution (replay, audit), beside the package and installed with it here."""
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"
STAMP = VENV / ".puredetok-installed"
DEMO_TEXT = "鱻䨻🦩 is rare, 推理 naïve"


def run(*command: str | Path, env: dict[str, str] | None = None, cwd: str | Path = ROOT) -> None:
    """Run a command, stopping the task with its exit code if it fails."""
    print("+", " ".join(str(part) for part in command), flush=True)
    completed = subprocess.run([str(part) for part in command], cwd=cwd, env=env)
    if completed.returncode:
        sys.exit(completed.returncode)


def ensure_venv(dev: bool) -> None:
    """Create .venv and install the project, with the dev extras and puredetok-audit if ``dev``
    (again when a pyproject.toml changed; an install with the extras also serves the tasks that
    need none).
    """
    projects = (ROOT / "pyproject.toml").read_bytes() + (AUDIT / "pyproject.toml").read_bytes()
    digest = hashlib.sha256(projects).hexdigest()
    installed = STAMP.read_text() if STAMP.exists() else ""
    if installed == f"{digest} dev" or installed == f"{digest} package" and not dev:
        return
    if not PYTHON.exists():
        venv.create(VENV, with_pip=True)
    targets = ("-e", ".[dev]", "-e", AUDIT) if dev else ("-e", ".")
    run(PYTHON, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *targets)
    STAMP.write_text(f"{digest} {'dev' if dev else 'package'}")


def _purelib(python: Path) -> Path:
    """The site-packages folder of the environment of ``python``."""
    query = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(
        subprocess.run([str(python), "-c", query], capture_output=True, text=True, check=True).stdout.strip()
    )


def wheel_check() -> None:
    """Build the wheels, install puredetok's alone in a fresh venv and run ``puredetok`` from
    there, offline; then ``puredetok[audit]`` from the two wheels, and the checkers' commands.

    The fresh venv sees the dependencies through a ``.pth`` line naming a folder of links to the
    dev venv's site-packages, less the project's own installs (nothing is downloaded), and the
    check makes sure ``puredetok`` comes from the wheel: its package data (the embedded tokenizer)
    and its entry point; without puredetok-audit, ``puredetok audit`` says what to install.
    """
    with tempfile.TemporaryDirectory(prefix="puredetok-wheel-") as scratch:
        dist, fresh = Path(scratch) / "dist", Path(scratch) / "venv"
        pip = (PYTHON, "-m", "pip", "--disable-pip-version-check")
        run(*pip, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", dist, ".", AUDIT)
        [wheel] = dist.glob("puredetok-0*.whl")
        venv.create(fresh, with_pip=False)
        fresh_bin = fresh / BIN.name
        fresh_python = fresh_bin / PYTHON.name
        deps = Path(scratch) / "deps"
        deps.mkdir()
        for item in _purelib(PYTHON).iterdir():
            if not item.name.startswith(("puredetok", "_editable_impl_puredetok")):
                (deps / item.name).symlink_to(item)
        (_purelib(fresh_python) / "puredetok-deps.pth").write_text(f"{deps}\n")
        run(*pip, "--python", fresh_python, "install", "--quiet", "--no-deps", "--no-index", wheel)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
        origin = "import puredetok, sys; assert puredetok.__file__.startswith(sys.prefix), puredetok.__file__"
        run(fresh_python, "-c", origin, env=env, cwd=scratch)
        run(fresh_bin / "puredetok", "--version", env=env, cwd=scratch)
        run(fresh_bin / "puredetok", "explain", DEMO_TEXT, env=env, cwd=scratch)
        missing = subprocess.run(
            [fresh_bin / "puredetok", "audit", "log.jsonl"],
            env=env,
            cwd=scratch,
            capture_output=True,
            text=True,
        )
        if missing.returncode != 2 or "pip install 'puredetok[audit]'" not in missing.stderr:
            sys.exit(f"puredetok audit without puredetok-audit: {missing.returncode} {missing.stderr!r}")
        run(
            *pip,
            "--python",
            fresh_python,
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            dist,
            "puredetok[audit]",
        )
        origin = origin.replace("puredetok", "puredetok_audit")
        run(fresh_python, "-c", origin, env=env, cwd=scratch)
        run(
            fresh_bin / "puredetok",
            "replay",
            "--quiet",
            ROOT / "docs" / "sample-trace.jsonl",
            env=env,
            cwd=scratch,
        )


def demo() -> None:
    """The main job: stream the seed example (DEMO_TEXT) through the embedded tokenizer."""
    run(BIN / "puredetok", "explain", DEMO_TEXT)


def test() -> None:
    """The whole test suite: types, lint, format, the docs build, the wheel installed alone, tests
    (HYPOTHESIS_PROFILE=ci for CI).
    """
    run(BIN / "mypy")
    sources = ("src", AUDIT, "tests", "tools", "benchmarks", "engine_tests", "tasks.py")
    run(BIN / "ruff", "check", *sources)
    run(BIN / "ruff", "format", "--check", *sources)
    with tempfile.TemporaryDirectory() as site:
        run(BIN / "mkdocs", "build", "--strict", "--quiet", "--site-dir", site)
    wheel_check()
    env = {**os.environ, "HYPOTHESIS_PROFILE": os.environ.get("HYPOTHESIS_PROFILE", "dev")}
    # The slowest tests are listed so that the suite's time in CI stays in view.
    workers = os.environ.get("PYTEST_WORKERS", "auto")
    run(PYTHON, "-m", "pytest", "-n", workers, "--durations=25", env=env)


ENGINE_TESTS = ROOT / "engine_tests"
"""One folder per engine: its pinned ``requirements.txt`` and the tests that run inside that engine."""


def engine_requirements(name: str, version: str | None = None) -> str:
    """The requirements of one engine's environment: its pinned ``requirements.txt``, or with
    ``version`` the same with the engine's own pin (the ``NAME==...`` line) made that version.
    """
    pinned = (ENGINE_TESTS / name / "requirements.txt").read_text()
    if version is None:
        return pinned
    lines = pinned.splitlines(keepends=True)
    pins = [index for index, line in enumerate(lines) if line.split("==")[0].strip().lower() == name]
    if len(pins) != 1:
        sys.exit(f"engine_tests/{name}/requirements.txt pins {name} on {len(pins)} lines, not one")
    lines[pins[0]] = f"{name}=={version}\n"
    return "".join(lines)


UNINSTALLABLE = {"sglang": frozenset({"cuda-tile"})}
"""Per engine, dependencies of some of its versions that pip cannot install from the package
index: placeholders that download their real wheel from NVIDIA's index (``cuda-tile==1.6.0rc5``,
required by SGLang 0.5.22 and older; CUDA kernels the detokenizer does not import on a CPU). An
environment of another version of such an engine gets the engine alone (``--no-deps``), then
every dependency it declares but these (:func:`_installable`)."""


def _installable(python: Path, name: str, requirements: str, target: Path) -> Path:
    """``target`` made the requirements pip installs beside the engine ``name`` installed alone in
    the environment of ``python``: the dependencies the engine declares, but its extras' and
    those of :data:`UNINSTALLABLE`, then the other lines of ``requirements``.
    """
    query = f"import importlib.metadata as m; print(*(m.requires({name!r}) or ()), sep='\\n')"
    declared = subprocess.run([str(python), "-c", query], capture_output=True, text=True, check=True).stdout
    skipped = UNINSTALLABLE.get(name, frozenset())
    kept = []
    for line in declared.splitlines():
        project = line.split(";")[0].strip()
        for separator in "[=<>!~ (":
            project = project.split(separator)[0]
        if line.strip() and "extra ==" not in line and project.lower().replace("_", "-") not in skipped:
            kept.append(line)
    kept += [line for line in requirements.splitlines() if line.split("==")[0].strip().lower() != name]
    target.write_text("".join(f"{line}\n" for line in kept))
    return target


LOCAL_ENGINES = {"minisgl": ("PUREDETOK_MINISGL_SOURCE", "../shared/engines/mini-sglang")}
"""Engines not on the package index: per engine, the variable naming its source folder and the
folder it names by default (relative to this clone)."""

_BUILT = frozenset({"build", "dist", "__pycache__"})
"""Folders of a source tree that a build leaves behind (not part of the source)."""


def local_source(name: str) -> tuple[Path, str] | None:
    """The source folder of a :data:`LOCAL_ENGINES` engine and a digest of its files (None for an
    engine on the package index); stops the task, saying where it looked, if the folder is absent.
    """
    if name not in LOCAL_ENGINES:
        return None
    variable, default = LOCAL_ENGINES[name]
    source = (ROOT / os.environ.get(variable, default)).resolve()
    if not (source / "pyproject.toml").is_file():
        sys.exit(
            f"{name}'s source is not at {source} (no pyproject.toml there): it is not on the package "
            f"index; set {variable} to its folder (default: {default}, beside this clone)"
        )
    digest = hashlib.sha256()
    for file in _source_files(source):
        digest.update(f"{file}\0".encode() + (source / file).read_bytes())
    return source, digest.hexdigest()[:12]


def _install_local(python: Path, source: Path) -> None:
    """Install a :data:`LOCAL_ENGINES` engine from ``source`` alone (``--no-deps``: its
    requirements.txt says which of its dependencies the tests need), from a copy, since pip builds
    a local folder in place and ``source`` may be read-only.
    """
    with tempfile.TemporaryDirectory(prefix="puredetok-engine-source-") as scratch:
        copy = Path(scratch) / source.name
        for file in _source_files(source):
            (copy / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / file, copy / file)  # contents only: the copy is writable
        run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", copy)


def _source_files(source: Path) -> list[Path]:
    """The files of a source tree, relative to it, in order (what a build leaves behind left out)."""
    files = []
    for file in sorted(source.rglob("*")):
        parts = file.relative_to(source).parts
        if file.is_file() and not _BUILT & set(parts) and not any(p.endswith(".egg-info") for p in parts):
            files.append(file.relative_to(source))
    return files


def _engine_folder(name: str, requirements: str, version: str | None = None, overlay: bool = False) -> Path:
    """Where the environment of these requirements lives (see :func:`engine_env`)."""
    key = hashlib.sha256((requirements + ("overlay" if overlay else "")).encode()).hexdigest()[:12]
    home = Path(os.environ.get("PUREDETOK_ENGINE_ENVS", Path.home() / ".cache" / "puredetok" / "engine-envs"))
    label = name if version is None else f"{name}-{version}-overlay" if overlay else f"{name}-{version}"
    return home / f"{label}-{key}"


def engine_env(name: str, version: str | None = None, overlay: bool = False) -> Path:
    """The environment of one engine, outside the clone and keyed by its requirements
    (:func:`engine_requirements`; another ``version`` than the pinned one is also in the folder's
    name), so that later runs (and other clones) reuse it: made once with the engine's own
    dependencies (torch, its transformers), then given this checkout of puredetok, with the
    engine's extra for the pinned version (without it for another, whose pin the extra may not
    allow).

    With ``overlay`` (for a ``version`` whose own dependencies the package index cannot resolve),
    the environment holds only that version of the engine (``--no-deps``) and puredetok, over the
    pinned environment's packages (a ``.pth`` line naming its site-packages, after its own); ``pip
    check`` then lists the engine's requirements those packages do not meet. Without it, another
    version of an engine of :data:`UNINSTALLABLE` gets the engine alone, then every dependency it
    declares but those (``sglang==0.5.22``: all of its own, at its own versions, but ``cuda-tile``).
    """
    requirements = engine_requirements(name, version)
    local = local_source(name)
    if local is not None:  # its source's digest keys the environment too
        requirements += f"# {name} source {local[1]}\n"
    env = _engine_folder(name, requirements, version, overlay)
    python = env / BIN.name / PYTHON.name
    pip = (python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
    pinned = env / "requirements.txt"
    # what pip installs beside puredetok: the requirements, or for another version of an engine of
    # UNINSTALLABLE what else it needs (pip would look for its placeholders again otherwise)
    alone = version is not None and not overlay and name in UNINSTALLABLE
    wanted = env / "installable.txt" if alone else pinned
    if not (env / ".ready").exists():
        base = _engine_folder(name, engine_requirements(name)) if overlay else None
        if base is not None and not (base / ".ready").exists():
            base = engine_env(name)
        # An overlay has no pip or setuptools of its own: the pinned environment's serve it.
        venv.create(env, with_pip=base is None, clear=True)
        pinned.write_text(requirements)
        if alone:
            run(*pip, "--no-deps", f"{name}=={version}")
            run(*pip, "-r", _installable(python, name, requirements, wanted))
        elif base is None:
            run(*pip, "-r", pinned)
            if local is not None:
                _install_local(python, local[0])
        else:
            base_python = base / BIN.name / PYTHON.name
            (_purelib(python) / f"{name}-pinned.pth").write_text(f"{_purelib(base_python)}\n")
            run(*pip, "--no-deps", f"{name}=={version}")
        (env / ".ready").write_text(requirements)
    if overlay:
        run(*pip, "--no-deps", "-e", ROOT, "-e", AUDIT)
        print("+ pip check (the engine's requirements the pinned environment does not meet):", flush=True)
        subprocess.run([str(python), "-m", "pip", "check", "--disable-pip-version-check"])
    else:
        pinned.write_text(requirements)
        run(*pip, "-e", f"{ROOT}[{name}]" if version is None else ROOT, "-e", AUDIT, "-r", wanted)
    return env


def test_engines() -> None:
    """The engines' own code with puredetok plugged in: each engine's tests in its own pinned
    environment (``python3 tasks.py test-engines [NAME ...]``, all of ``engine_tests/`` by default).
    ``NAME==VERSION`` runs them on another version of that engine instead of the pinned one, in an
    environment of its own resolved by pip; ``--overlay`` puts that version alone over the pinned
    environment's packages instead (see :func:`engine_env`). CI runs the pinned versions only.
    """
    arguments = sys.argv[2:]
    overlay = "--overlay" in arguments
    names = [argument for argument in arguments if argument != "--overlay"] or sorted(
        path.parent.name for path in ENGINE_TESTS.glob("*/requirements.txt")
    )
    for argument in names:
        name, _, version = argument.partition("==")
        if not (ENGINE_TESTS / name / "requirements.txt").exists():
            sys.exit(f"no engine {name!r}: engine_tests/{name}/requirements.txt does not exist")
        if overlay and not version:
            sys.exit(f"--overlay needs a version: {name}==VERSION")
        env = engine_env(name, version or None, overlay)
        environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        environment.setdefault("HYPOTHESIS_PROFILE", "dev")
        run(
            env / BIN.name / "python",
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            ENGINE_TESTS / name,
            env=environment,
        )


OLDEST_EXTRAS = {ROOT: ("testing", "mistral"), AUDIT: ("formats", "ray")}
"""Per distribution, the extras whose ranges the oldest run proves (the engines' are the engine
tests'; puredetok's ``audit`` and ``ray`` are puredetok-audit's ``formats`` and ``ray``)."""

OLDEST_ALSO = (
    "numpy<2",  # pyarrow 14 is built against NumPy 1 and fails at import under NumPy 2
)
"""Pins beside the lower bounds: what the oldest releases need of packages puredetok does not name."""

OLDEST_TESTS: dict[str, tuple[str, ...]] = {
    # transformers: what its releases decode differently
    "tests/builder/test_release_differences.py": ("transformers", "tokenizers"),
    # G1 - G7 on every shared tokenizer, under the property search
    "tests/core/test_guarantees.py": ("transformers", "tokenizers", "hypothesis"),
    # every path a user takes (the managers, a worker with both clients, replay, audit locally and
    # on Ray, the streamers, the kit) on every shared tokenizer family
    "tests/package/test_matrix.py": (
        "transformers",
        "tokenizers",
        "attrs",
        "msgspec",
        "pyzmq",
        "tqdm",
        "ray",
        "pyarrow",
        "hypothesis",
    ),
    # the rows where a release decides otherwise: the field cases, the streamer, the state's size
    "tests/core/test_field_cases.py": ("transformers", "tokenizers"),
    "tests/testing/test_streamer.py": ("transformers",),
    "tests/core/test_edge_tokenizers.py": ("tokenizers",),
    "tests/core/test_saving.py": ("transformers", "tokenizers", "attrs"),
    # mypy --strict on user code over transformers' and msgspec's own types
    "tests/package/test_typing_user_code.py": ("transformers", "tokenizers", "msgspec"),
    "tests/serving/test_tokenize_manager.py": ("jinja2",),  # chat templates
    "tests/worker/test_wire.py": ("msgspec",),  # the wire's records, hostile frames
    "tests/builder/test_pyclass_mistral.py": ("mistral-common",),
    "tests/builder/test_pyclass_tekken.py": ("mistral-common",),
    # the kit's strategies and search, under the oldest pytest the testing extra allows (the
    # runner of every module here)
    "tests/testing/test_testing_kit.py": ("hypothesis", "pytest"),
    "tests/audit/test_audit_compressed.py": ("zstandard", "hypothesis"),  # and a log cut short
    # a failed Ray task ends the run with one line on stderr (Ray 2.51 and tokenizers added theirs)
    "tests/audit/test_audit_on_ray.py": ("ray", "tokenizers"),
}
"""The modules ``test-oldest`` runs, each with the dependencies whose oldest release it proves
(every dependency and extra of :data:`OLDEST_EXTRAS` at least once; test_matrix.py every shared
tokenizer family): within CI's time, where the whole suite is not (docs/versions.md)."""

OLDEST_TOOLS = (
    "pytest",
    "pytest-timeout",
    "pytest-xdist",
    "mypy",
    "sentencepiece",
    "hatchling",
    "mkdocs",
    "mkdocstrings[python]",
)
"""What the oldest run needs besides the package: the test tools (their newest releases, but pytest:
the testing extra's floor, which the constraints pin), with what the API reference's and the
wheel's tests read, so that ``test-oldest tests`` runs every module."""


def oldest_pins(pyprojects: dict[str, tuple[str, ...]]) -> str:
    """A pip constraints file of the oldest release every range of the ``pyprojects`` (each one's
    text, with the extras to read) allows: each ``>=`` lower bound of the dependencies and of the
    extras as an ``==`` pin, then :data:`OLDEST_ALSO`; the pins between puredetok and
    puredetok-audit are their own. Exits naming a requirement without a lower bound (there is no
    oldest).
    """
    requirements: list[str] = []
    for pyproject, extras in pyprojects.items():
        project = tomllib.loads(pyproject)["project"]
        requirements += project["dependencies"]
        for extra in extras:
            requirements += project["optional-dependencies"][extra]
    pins: dict[str, str] = {}
    for requirement in requirements:
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?\s*(.*)", requirement.strip())
        if found is not None and found.group(1).lower() in ("puredetok", "puredetok-audit"):
            continue
        lower = [part.strip()[2:] for part in (found.group(3) if found else "").split(",") if ">=" in part]
        if found is None or len(lower) != 1:
            sys.exit(f"pyproject.toml: {requirement!r} has no lower bound, so no oldest release to test")
        name = found.group(1).lower().replace("_", "-")
        if pins.setdefault(name, lower[0]) != lower[0]:
            sys.exit(f"pyproject.toml: {name} has two lower bounds, {pins[name]} and {lower[0]}")
    return "".join(f"{name}=={version}\n" for name, version in sorted(pins.items())) + "".join(
        f"{line}\n" for line in OLDEST_ALSO
    )


def oldest_env() -> Path:
    """The environment of the oldest allowed releases (:func:`oldest_pins`), outside the clone and
    keyed by its pins like the engines' (made once, reused by later runs and other clones), with
    this checkout of puredetok installed (again on every run: another clone may share it).
    """
    pins = oldest_pins(
        {(root / "pyproject.toml").read_text(): extras for root, extras in OLDEST_EXTRAS.items()}
    )
    wanted = pins + "".join(f"{tool}\n" for tool in OLDEST_TOOLS)
    env = _engine_folder("oldest", wanted)
    python = env / BIN.name / PYTHON.name
    pip = (python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
    if not (env / ".ready").exists():
        venv.create(env, with_pip=True, clear=True)
        (env / "constraints.txt").write_text(pins)
        projects = [f"{root}[{','.join(extras)}]" for root, extras in OLDEST_EXTRAS.items()]
        run(*pip, "-c", env / "constraints.txt", *projects, *OLDEST_TOOLS)
        (env / ".ready").write_text(wanted)
    run(*pip, "--no-deps", "-e", ROOT, "-e", AUDIT)
    return env


def test_oldest() -> None:
    """The tests of :data:`OLDEST_TESTS` on the oldest release every range of pyproject.toml allows
    (:func:`oldest_env`; ``.venv`` has the newest), with ``HYPOTHESIS_PROFILE=ci-oldest`` unless one
    is set. Arguments go to pytest instead (``python3 tasks.py test-oldest tests`` runs them all).
    """
    env = oldest_env()
    python = env / BIN.name / PYTHON.name
    query = (
        "import importlib.metadata as m; print(*(f'{n} {m.version(n)}' for n in __import__('sys').argv[1:]))"
    )
    names = sorted(
        line.split("==")[0] for line in (env / "constraints.txt").read_text().splitlines() if "==" in line
    )
    run(python, "-c", query, *names)
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    environment.setdefault("HYPOTHESIS_PROFILE", "ci-oldest")
    workers = os.environ.get("PYTEST_WORKERS", "auto")
    arguments = sys.argv[2:] or ["--durations=15", *OLDEST_TESTS]
    run(python, "-m", "pytest", "-p", "no:cacheprovider", "-n", workers, *arguments, env=environment)


def bench() -> None:
    """The benchmarks beside the package (ratios measured side by side): ``python3 tasks.py bench
    [MODULE] [ARGS]`` runs ``python -m benchmarks[.MODULE] ARGS`` from the repository's root, every
    section of :mod:`benchmarks` when no module is named.
    """
    arguments = sys.argv[2:]
    module = "benchmarks"
    if arguments and not arguments[0].startswith("-"):
        module = f"benchmarks.{arguments.pop(0)}"
    run(PYTHON, "-m", module, *arguments)


def docs() -> None:
    """Build the documentation into site/ (warnings are errors)."""
    run(BIN / "mkdocs", "build", "--strict")


TASKS = {
    "demo": demo,
    "test": test,
    "bench": bench,
    "docs": docs,
    "test-engines": test_engines,
    "test-oldest": test_oldest,
}
DEV = {"test", "docs", "bench"}
"""The tasks that need the dev extras."""
ARGUED = {"test-engines", "test-oldest", "bench"}
"""The tasks that take arguments."""
OWN_ENVS = {"test-engines", "test-oldest"}
"""The tasks that run in environments of their own, not ``.venv``."""

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in TASKS or len(sys.argv) > 2 and sys.argv[1] not in ARGUED:
        print(f"usage: python3 tasks.py {{{'|'.join(TASKS)}}}", file=sys.stderr)
        sys.exit(2)
    if sys.argv[1] not in OWN_ENVS:
        ensure_venv(dev=sys.argv[1] in DEV)
    TASKS[sys.argv[1]]()
