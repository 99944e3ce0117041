"""The commands another distribution brings: puredetok-audit's ``replay`` and ``audit`` join
``puredetok`` through the ``puredetok.commands`` entry points, and without it each says what to
install (the wheel check of tasks.py runs the same in a fresh environment holding puredetok alone)."""

from __future__ import annotations

from importlib import metadata

import pytest

import puredetok_audit._cli.audit
import puredetok_audit._cli.replay
from puredetok.cli import _main, main


def test_the_checkers_commands_come_from_their_entry_points() -> None:
    points = {point.name: point.value for point in metadata.entry_points(group=_main.COMMANDS_GROUP)}
    assert points == {"replay": "puredetok_audit._cli.replay", "audit": "puredetok_audit._cli.audit"}
    commands = _main._commands()
    assert puredetok_audit._cli.replay in commands and puredetok_audit._cli.audit in commands


@pytest.mark.parametrize("argv", [["audit", "log.jsonl", "--report", "r.jsonl"], ["replay", "-"]])
def test_without_puredetok_audit_a_checker_says_what_to_install(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(metadata, "entry_points", lambda group: [])
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    said = "needs puredetok-audit, not installed: pip install 'puredetok[audit]' (from a checkout: "
    said += "pip install ./puredetok-audit)"
    assert err == f"puredetok {argv[0]}: error: {said}\n"


def test_without_puredetok_audit_the_help_still_lists_every_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(metadata, "entry_points", lambda group: [])
    monkeypatch.setenv("COLUMNS", "200")  # each command's help on one line
    with pytest.raises(SystemExit) as exit:
        main(["--help"])
    assert exit.value.code == 0
    listed = capsys.readouterr().out
    for command in ("explain", "bench", "replay", "serve", "audit"):
        assert f"    {command} " in listed
    assert listed.count("needs puredetok-audit, not installed: pip install 'puredetok[audit]'") == 2


def test_a_command_whose_module_does_not_import_says_so_and_the_others_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken install of another distribution (its entry point left, its package gone) costs only
    its own command."""
    broken = metadata.EntryPoint(name="audit", value="puredetok_audit_gone._cli", group=_main.COMMANDS_GROUP)
    monkeypatch.setattr(metadata, "entry_points", lambda group: [broken])
    assert main(["explain", "hi", "--json"]) == 0
    capsys.readouterr()
    assert main(["audit", "log.jsonl"]) == 2
    said = "puredetok_audit_gone._cli (from puredetok.commands) does not import: "
    said += "ModuleNotFoundError(\"No module named 'puredetok_audit_gone'\")"
    assert capsys.readouterr().err == f"puredetok audit: error: {said}\n"
