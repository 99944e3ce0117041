"""tasks.py: ``demo`` installs the package alone, ``test`` adds the dev extras and checks the wheel."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
    assert "demo" not in module.DEV and "bench" not in module.DEV and "test" in module.DEV
    module.ensure_venv(dev=False)
    assert commands[-1][-2:] == ("-e", ".")
    module.ensure_venv(dev=False)  # installed: nothing to do
    assert len(commands) == 1
    module.ensure_venv(dev=True)
    assert commands[-1][-2:] == ("-e", ".[dev]") and len(commands) == 2
    module.ensure_venv(dev=False)  # the dev install serves the demo too
    module.ensure_venv(dev=True)
    assert len(commands) == 2


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
    assert lines[-2:] == ["python3 tasks.py test", "exec python3 tasks.py test-engines"]
    assert "set -eu" in lines
