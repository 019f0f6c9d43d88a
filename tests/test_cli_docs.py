"""docs/cli.md holds the real ``--help`` of every command (generated with cog): it cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cogapp import Cog

from vaultmem.cli import app, help_text

DOC = Path(__file__).parent.parent / "docs" / "cli.md"


NAMES = [c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands]


def test_cli_md_is_what_the_generator_prints(capsys: pytest.CaptureFixture[str]) -> None:
    status = Cog().main(["cog", "--check", "--diff", str(DOC)])
    assert status == 0, f"docs/cli.md is out of date: run `just docs`\n{capsys.readouterr().out}"


def test_every_command_has_its_generated_help_block() -> None:
    doc = DOC.read_text(encoding="utf-8")
    for name in NAMES:
        assert f'<!-- [[[cog show("{name}") ]]] -->' in doc, name
        assert help_text(name).splitlines()[0] in doc


def test_flags_are_shown_without_a_value_type() -> None:
    for name in NAMES:  # every command returns data, so every one takes --json
        text = help_text(name)
        assert "<bool>" not in text
        assert re.search(r"^  --json +Print JSON instead of text\.$", text, re.M), name


def test_every_command_of_a_group_has_its_generated_help_block() -> None:
    doc = DOC.read_text(encoding="utf-8")
    groups = {g.name: g.typer_instance for g in app.registered_groups}
    assert set(groups) >= {"hook", "export"}
    for group, sub in groups.items():
        assert f'<!-- [[[cog show("{group}") ]]] -->' in doc, group
        for command in sub.registered_commands:
            name = f"{group} {command.name}"
            assert f'<!-- [[[cog show("{name}") ]]] -->' in doc, name
            assert help_text(name).splitlines()[0] in doc
