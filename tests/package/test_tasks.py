"""tasks.py: ``demo`` installs the package alone, ``test`` adds the dev extras and checks the wheel."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_tasks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tasks_under_test", ROOT / "tasks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, list[tuple[str, ...]]]:
    """tasks.py with its venv in a temporary folder and its commands recorded, not run."""
    module = load_tasks()
    commands: list[tuple[str, ...]] = []
    venv = tmp_path / "venv"

    def create(path: Path, **options: Any) -> None:
        (path / "bin").mkdir(parents=True)
        (path / "bin" / "python").write_text("")

    monkeypatch.setattr(module, "VENV", venv)
    monkeypatch.setattr(module, "PYTHON", venv / "bin" / "python")
    monkeypatch.setattr(module, "STAMP", venv / ".puredetok-installed")
    monkeypatch.setattr(module.venv, "create", create)
    monkeypatch.setattr(module, "run", lambda *command, **options: commands.append(tuple(map(str, command))))
    return module, commands


def test_demo_installs_the_package_alone_and_test_adds_the_dev_extras(
    tasks: tuple[ModuleType, list[tuple[str, ...]]],
) -> None:
    module, commands = tasks
    # the benchmarks beside the package measure the extras' paths too (Ray, pyarrow, mistral-common)
    assert "demo" not in module.DEV and "bench" in module.DEV and "test" in module.DEV
    module.ensure_venv(dev=False)
    assert commands[-1][-2:] == ("-e", ".")
    module.ensure_venv(dev=False)  # installed: nothing to do
    assert len(commands) == 1
    module.ensure_venv(dev=True)
    assert commands[-1][-4:] == ("-e", ".[dev]", "-e", str(ROOT / "puredetok-audit")) and len(commands) == 2
    module.ensure_venv(dev=False)  # the dev install serves the demo too
    module.ensure_venv(dev=True)
    assert len(commands) == 2


@pytest.mark.parametrize(
    ("argv", "module_name", "rest"),
    [
        ([], "benchmarks", []),
        (["--serving-only"], "benchmarks", ["--serving-only"]),
        (["holds", "qwen3=PATH"], "benchmarks.holds", ["qwen3=PATH"]),
    ],
)
def test_the_bench_task_runs_a_benchmark_beside_the_package(
    tasks: tuple[ModuleType, list[tuple[str, ...]]],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    module_name: str,
    rest: list[str],
) -> None:
    module, commands = tasks
    monkeypatch.setattr(module.sys, "argv", ["tasks.py", "bench", *argv])
    module.bench()
    assert commands[-1] == (str(module.PYTHON), "-m", module_name, *rest)


def test_the_test_task_checks_the_wheel_after_the_docs_and_before_pytest(
    tasks: tuple[ModuleType, list[tuple[str, ...]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    module, commands = tasks
    monkeypatch.setattr(module, "wheel_check", lambda: commands.append(("wheel_check",)))
    module.test()
    names = [Path(command[0]).name if command[0] != "wheel_check" else "wheel_check" for command in commands]
    assert names.index("mkdocs") < names.index("wheel_check") < len(names) - 1
    assert commands[-1][1:3] == ("-m", "pytest")


def test_ci_runs_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 tasks.py test" in readme
    lines = ci.rstrip().splitlines()
    assert lines[-3:] == [
        "python3 tasks.py test",
        "HYPOTHESIS_PROFILE=ci-oldest python3 tasks.py test-oldest",
        "exec python3 tasks.py test-engines",
    ]
    assert "set -eu" in lines


def test_an_engine_on_another_version_gets_an_environment_of_its_own(
    tasks: tuple[ModuleType, list[tuple[str, ...]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``test-engines vllm==VERSION``: the pinned requirements with the engine's own pin made that
    version, in a folder keyed by them (the pinned environment's key is unchanged), puredetok
    installed without the engine's extra (whose bound the version may not meet)."""
    module, commands = tasks
    monkeypatch.setenv("PUREDETOK_ENGINE_ENVS", str(tmp_path / "envs"))
    pinned = (ROOT / "engine_tests" / "vllm" / "requirements.txt").read_text()
    other = module.engine_requirements("vllm", "0.34.0")
    assert module.engine_requirements("vllm") == pinned
    assert other == pinned.replace(
        next(line for line in pinned.splitlines() if line.startswith("vllm==")), "vllm==0.34.0"
    )
    env = module.engine_env("vllm", "0.34.0")
    key = hashlib.sha256(other.encode()).hexdigest()[:12]
    assert env == tmp_path / "envs" / f"vllm-0.34.0-{key}"
    assert (env / "requirements.txt").read_text() == other and (env / ".ready").exists()
    assert commands[0][-2:] == ("-r", str(env / "requirements.txt"))
    assert commands[-1][-5:] == (
        str(ROOT),
        "-e",
        str(ROOT / "puredetok-audit"),
        "-r",
        str(env / "requirements.txt"),
    )
    key = hashlib.sha256(pinned.encode()).hexdigest()[:12]
    assert module.engine_env("vllm") == tmp_path / "envs" / f"vllm-{key}"
    assert commands[-1][-5] == f"{ROOT}[vllm]"


def test_an_overlay_puts_the_version_alone_over_the_pinned_environment(
    tasks: tuple[ModuleType, list[tuple[str, ...]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--overlay``: the engine's version installed alone (``--no-deps``) in an environment whose
    ``.pth`` line names the pinned environment's site-packages, then ``pip check`` run."""
    module, commands = tasks
    monkeypatch.setenv("PUREDETOK_ENGINE_ENVS", str(tmp_path / "envs"))
    checks: list[list[str]] = []
    monkeypatch.setattr(module.subprocess, "run", lambda command, **options: checks.append(command))

    def purelib(python: Path) -> Path:
        (python.parents[1] / "site").mkdir(exist_ok=True)
        return python.parents[1] / "site"

    monkeypatch.setattr(module, "_purelib", purelib)
    pinned = module.engine_env("vllm")
    env = module.engine_env("vllm", "0.34.0", overlay=True)
    assert env.name.startswith("vllm-0.34.0-overlay-") and env != module.engine_env("vllm", "0.34.0")
    assert (env / "site" / "vllm-pinned.pth").read_text() == f"{pinned / 'site'}\n"
    overlay = [command for command in commands if command[0] == str(env / "bin" / "python")]
    assert overlay[0][-2:] == ("--no-deps", "vllm==0.34.0")
    assert overlay[1][-5:] == ("--no-deps", "-e", str(ROOT), "-e", str(ROOT / "puredetok-audit"))
    assert checks[0][1:4] == ["-m", "pip", "check"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [(["nothing==1.0"], "no engine 'nothing'"), (["vllm", "--overlay"], "--overlay needs a version")],
)
def test_test_engines_refuses_an_unknown_engine_and_an_overlay_without_a_version(
    tasks: tuple[ModuleType, list[tuple[str, ...]]],
    monkeypatch: pytest.MonkeyPatch,
    arguments: list[str],
    message: str,
) -> None:
    module, commands = tasks
    monkeypatch.setattr(module.sys, "argv", ["tasks.py", "test-engines", *arguments])
    with pytest.raises(SystemExit, match=message):
        module.test_engines()
    assert commands == []


def test_another_sglang_gets_its_own_dependencies_but_the_placeholder_pip_cannot_install(
    tasks: tuple[ModuleType, list[tuple[str, ...]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``test-engines sglang==0.5.22``: SGLang 0.5.22 requires ``cuda-tile==1.6.0rc5``, a
    placeholder that downloads its wheel from NVIDIA's index: SGLang goes in alone, then every
    dependency it declares but that one (and its extras'), and the requirements' other lines,
    never the pin again (pip would look for the placeholder)."""
    module, commands = tasks
    monkeypatch.setenv("PUREDETOK_ENGINE_ENVS", str(tmp_path / "envs"))
    declared = [
        "torch==2.14.1",
        "cuda-tile==1.6.0rc5",
        "cuda_tile>=1",
        'flashinfer_python[cu13]==0.7.1; sys_platform == "linux"',
        'pytest; extra == "test"',
    ]
    monkeypatch.setattr(
        module.subprocess, "run", lambda *args, **options: SimpleNamespace(stdout="\n".join(declared))
    )
    env = module.engine_env("sglang", "0.5.22")
    assert env.name.startswith("sglang-0.5.22-")
    installable = env / "installable.txt"
    assert commands[0][-2:] == ("--no-deps", "sglang==0.5.22")
    assert commands[1][-2:] == commands[2][-2:] == ("-r", str(installable))
    others = [line for line in module.engine_requirements("sglang").splitlines() if "sglang" not in line]
    assert installable.read_text().splitlines() == [declared[0], declared[3], *others]
    commands.clear()
    pinned = module.engine_env("sglang")  # the pinned SGLang installs as its requirements say
    assert [command[-2:] for command in commands] == [("-r", str(pinned / "requirements.txt"))] * 2


def test_an_engine_not_on_the_package_index_is_installed_alone_from_a_copy_of_its_source(
    tasks: tuple[ModuleType, list[tuple[str, ...]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``test-engines minisgl``: mini-sglang's source (the folder ``PUREDETOK_MINISGL_SOURCE`` names,
    ../shared/engines/mini-sglang by default) is installed with ``--no-deps`` from a writable copy
    of it (what a build left in it left out), after the requirements; its digest keys the
    environment, so a changed source gets a new one."""
    module, commands = tasks
    monkeypatch.setenv("PUREDETOK_ENGINE_ENVS", str(tmp_path / "envs"))
    source = tmp_path / "mini-sglang"
    (source / "python" / "minisgl").mkdir(parents=True)
    (source / "pyproject.toml").write_text("[project]\nname = 'minisgl'\n")
    (source / "python" / "minisgl" / "core.py").write_text("X = 1\n")
    (source / "build" / "lib").mkdir(parents=True)
    (source / "build" / "lib" / "stale.py").write_text("")
    (source / "python" / "minisgl.egg-info").mkdir()
    (source / "python" / "minisgl.egg-info" / "PKG-INFO").write_text("")
    for path in [*source.rglob("*"), source]:
        path.chmod(0o555 if path.is_dir() else 0o444)  # as ../shared is laid: read-only
    monkeypatch.setenv("PUREDETOK_MINISGL_SOURCE", str(source))
    copied: list[list[str]] = []

    def record(*command: str | Path, **options: object) -> None:
        commands.append(tuple(map(str, command)))
        if "--no-deps" in command:
            copy = Path(command[-1])
            files = [path.relative_to(copy).as_posix() for path in copy.rglob("*") if path.is_file()]
            copied.append(sorted(files))

    monkeypatch.setattr(module, "run", record)
    env = module.engine_env("minisgl")
    assert commands[0][-2:] == ("-r", str(env / "requirements.txt"))
    assert commands[1][-2] == "--no-deps" and Path(commands[1][-1]).name == "mini-sglang"
    assert copied == [["pyproject.toml", "python/minisgl/core.py"]]
    assert commands[-1][-5] == f"{ROOT}[minisgl]"
    assert "# minisgl source " in (env / "requirements.txt").read_text()
    assert module.engine_env("minisgl") == env
    for path in [source, *source.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    (source / "python" / "minisgl" / "core.py").write_text("X = 2\n")
    assert module.engine_env("minisgl") != env


def test_an_engine_source_that_is_not_there_stops_the_task_saying_where_it_looked(
    tasks: tuple[ModuleType, list[tuple[str, ...]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, commands = tasks
    monkeypatch.setenv("PUREDETOK_MINISGL_SOURCE", str(tmp_path / "nowhere"))
    where = r"nowhere .*PUREDETOK_MINISGL_SOURCE.*\.\./shared/engines/mini-sglang"
    with pytest.raises(SystemExit, match=where):
        module.engine_env("minisgl")
    assert commands == []
    monkeypatch.delenv("PUREDETOK_MINISGL_SOURCE")
    if (ROOT.parent / "shared" / "engines" / "mini-sglang" / "pyproject.toml").is_file():
        assert module.local_source("minisgl") is not None  # the default, beside the clone
    else:  # a clone elsewhere: the default is not there, and the task says so
        with pytest.raises(SystemExit, match=where.replace("nowhere", "mini-sglang")):
            module.local_source("minisgl")
    assert module.local_source("vllm") is None


def _oldest_projects(module: ModuleType) -> dict[str, tuple[str, ...]]:
    """puredetok's and puredetok-audit's pyproject.toml, with the extras the oldest run reads."""
    return {(root / "pyproject.toml").read_text(): extras for root, extras in module.OLDEST_EXTRAS.items()}


def _declared(module: ModuleType) -> set[Any]:
    """The requirements (``packaging`` ones) the oldest run pins: both distributions' dependencies
    and extras, less the exact pins between the two."""
    import tomllib

    from packaging.requirements import Requirement

    declared = set()
    for text, extras in _oldest_projects(module).items():
        project = tomllib.loads(text)["project"]
        lines = project["dependencies"] + [
            line for extra in extras for line in project["optional-dependencies"][extra]
        ]
        declared |= {Requirement(line) for line in lines}
    return {
        requirement for requirement in declared if requirement.name not in ("puredetok", "puredetok-audit")
    }


def test_the_oldest_pins_are_the_lower_bounds_of_every_range() -> None:
    """``test-oldest`` installs each dependency's and each extra's lower bound, nothing newer, of
    both distributions."""
    module = load_tasks()
    assert set(module.OLDEST_EXTRAS) == {ROOT, ROOT / "puredetok-audit"}
    pins = module.oldest_pins(_oldest_projects(module)).splitlines()
    assert pins[: -len(module.OLDEST_ALSO)] == [
        "attrs==23.1",
        "hypothesis==6.100",
        "jinja2==3.1",
        "mistral-common==1.13",
        "msgspec==0.18",
        "pyarrow==14",
        "pytest==8",
        "pyzmq==25",
        "ray==2.51",
        "tokenizers==0.22.1",
        "tqdm==4.66",
        "transformers==5",
        "zstandard==0.22",
    ]
    assert pins[-len(module.OLDEST_ALSO) :] == list(module.OLDEST_ALSO)


@pytest.mark.parametrize(
    ("dependency", "message"),
    [("attrs", "has no lower bound"), ("attrs<30", "has no lower bound"), ("attrs>=1,>=2", "no lower bound")],
)
def test_a_range_without_one_lower_bound_has_no_oldest_release(dependency: str, message: str) -> None:
    module = load_tasks()
    pyproject = f'[project]\ndependencies = ["{dependency}"]\n[project.optional-dependencies]\ntesting = []\n'
    with pytest.raises(SystemExit, match=message):
        module.oldest_pins({pyproject: ("testing",)})


def test_the_oldest_environment_is_made_once_outside_the_clone_and_gets_this_checkout_every_run(
    tasks: tuple[ModuleType, list[tuple[str, ...]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, commands = tasks
    monkeypatch.setenv("PUREDETOK_ENGINE_ENVS", str(tmp_path / "envs"))
    env = module.oldest_env()
    assert env.parent == tmp_path / "envs" and env.name.startswith("oldest-")
    pins = module.oldest_pins(_oldest_projects(module))
    assert (env / "constraints.txt").read_text() == pins and (env / ".ready").exists()
    assert commands[0][-len(module.OLDEST_TOOLS) - 4 :] == (
        "-c",
        str(env / "constraints.txt"),
        f"{ROOT}[testing,mistral]",
        f"{ROOT / 'puredetok-audit'}[formats,ray]",
        *module.OLDEST_TOOLS,
    )
    assert commands[1][-5:] == ("--no-deps", "-e", str(ROOT), "-e", str(ROOT / "puredetok-audit"))
    assert module.oldest_env() == env and len(commands) == 3  # made once: only the checkout again


def test_the_oldest_run_runs_its_modules_unless_told_otherwise(
    tasks: tuple[ModuleType, list[tuple[str, ...]]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    module, commands = tasks
    assert all((ROOT / name).is_file() for name in module.OLDEST_TESTS)
    assert "tests/builder/test_release_differences.py" in module.OLDEST_TESTS
    monkeypatch.setattr(module, "oldest_env", lambda: tmp_path)
    (tmp_path / "constraints.txt").write_text("attrs==23.1\nnumpy<2\n")
    monkeypatch.setattr(module.sys, "argv", ["tasks.py", "test-oldest"])
    module.test_oldest()
    assert commands[-1][-len(module.OLDEST_TESTS) :] == tuple(module.OLDEST_TESTS)
    monkeypatch.setattr(module.sys, "argv", ["tasks.py", "test-oldest", "tests/worker/test_wire.py", "-x"])
    module.test_oldest()
    assert commands[-1][-2:] == ("tests/worker/test_wire.py", "-x")


def test_the_oldest_run_proves_every_dependency_and_every_shared_tokenizer() -> None:
    """Each dependency and each extra's dependency ``test-oldest`` installs at its lower bound is
    exercised by at least one module it runs, and the matrix of every shared tokenizer family is
    one of them."""
    module = load_tasks()
    declared = {requirement.name for requirement in _declared(module)}
    proven = {name for names in module.OLDEST_TESTS.values() for name in names}
    assert proven == declared
    assert "tests/package/test_matrix.py" in module.OLDEST_TESTS
    assert all((ROOT / name).is_file() for name in module.OLDEST_TESTS)


def test_the_versions_page_states_every_range_and_its_oldest_release() -> None:
    """docs/versions.md's table gives each range of the package and of the extras the oldest run
    proves as pyproject.toml declares it, and the oldest release as ``test-oldest`` pins it."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    module = load_tasks()
    declared = _declared(module)
    page = (ROOT / "docs" / "versions.md").read_text(encoding="utf-8")
    table = page.split("| dependency ", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    rows = {row.split(" | ")[0].lstrip("| ").split()[0].split("\\[")[0]: row.split(" | ") for row in table}
    pins = dict(
        line.split("==") for line in module.oldest_pins(_oldest_projects(module)).split() if "==" in line
    )
    assert set(rows) >= {requirement.name for requirement in declared}
    for requirement in declared:
        row = rows[requirement.name]
        assert SpecifierSet(row[1].strip("`")) == requirement.specifier, row
        assert Version(row[2].split()[0]) == Version(pins[requirement.name]), row
