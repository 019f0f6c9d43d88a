"""Source names become folders under sources/: every one must be a folder of its own on Linux, macOS
and Windows alike (no device names such as CON, no trailing dot, no two names that differ in case)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import run
from vaultmem.entities import slug_for
from vaultmem.errors import InvalidInput, UnsafePath
from vaultmem.ingest import check_new_sources
from vaultmem.layout import Layout, slug
from vaultmem.model import default_source_name, portable_name


@pytest.mark.parametrize("name", ["CON", "con", "Nul", "aux.notes", "COM1", "lpt9.txt", "prn"])
def test_windows_device_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidInput, match="Windows reserves it"):
        portable_name(name)


@pytest.mark.parametrize(
    "name", ["console", "auxiliary", "com10", "nulls", "con-notes", "mail", "team.slack"]
)
def test_ordinary_names_pass(name: str) -> None:
    assert portable_name(name) == name


def test_trailing_dot_and_unsafe_names_are_refused() -> None:
    with pytest.raises(InvalidInput, match=r"may not end in '\.'"):
        portable_name("notes.")
    with pytest.raises(UnsafePath):
        portable_name("../etc")


@pytest.mark.parametrize(
    ("folder", "source"),
    [
        ("My Notes", "my-notes"),
        ("AUX", "aux-source"),
        ("con.d", "con-source.d"),
        ("a..b", "a.b"),
        ("???", "source"),
    ],
)
def test_names_made_from_folders_are_portable(folder: str, source: str) -> None:
    assert default_source_name(folder) == source


def test_new_sources_must_not_differ_from_others_only_in_case(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    (tmp_path / "sources" / "mail").mkdir(parents=True)
    (tmp_path / "sources" / "con").mkdir()  # made before the rule: still usable as it is
    check_new_sources(layout, ["mail", "con", "chat"])
    with pytest.raises(InvalidInput, match=r"differs from the source 'mail' only in case.*use 'mail'"):
        check_new_sources(layout, ["Mail"])
    with pytest.raises(InvalidInput, match="only in case"):
        check_new_sources(layout, ["Team", "team"])
    with pytest.raises(InvalidInput, match="Windows reserves it"):
        check_new_sources(layout, ["aux"])


def test_source_names_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vault = tmp_path / "vault"
    assert run(["init", str(vault)], capsys)[0] == 0
    notes = tmp_path / "AUX"  # a folder named like a Windows device
    notes.mkdir()
    (notes / "todo.md").write_text("# Todo\n\nRenew the passport before the Kyoto trip.\n")
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"speaker": "Mara", "content": "Remember the ryokan check-in is at 15:00."}]))

    code, out, _ = run(["ingest", str(notes), "--json", "--vault", str(vault)], capsys)
    assert code == 0 and json.loads(out)["sources"] == ["aux-source"]
    code, out, _ = run(["ingest", str(chat), "--source", "Mail", "--json", "--vault", str(vault)], capsys)
    assert code == 0 and json.loads(out)["sources"] == ["Mail"]
    for source, needle in (("mail", "only in case"), ("CON", "Windows reserves it"), ("trip.", "end in '.'")):
        code, out, err = run(["ingest", str(chat), "--source", source, "--vault", str(vault)], capsys)
        assert code == 1 and needle in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in (vault / "sources").iterdir()) == ["Mail", "aux-source"]
    code, out, _ = run(["ingest", str(chat), "--source", "Mail", "--json", "--vault", str(vault)], capsys)
    assert code == 0 and json.loads(out)["duplicates"] == 1  # the existing source keeps working


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=80))
def test_folders_the_engine_names_are_portable(text: str) -> None:
    # levels (NN-<slug>) and topics (<kind>-<slug>): lower-case ASCII, never a device name or a dot end
    level = f"01-{slug(text, words=4, max_len=40) or 'level'}"
    assert re.fullmatch(r"[a-z0-9-]+", level) and portable_name(level) == level
    key = f"person:{text.strip() or 'x'}"
    if "\r" not in key and "\n" not in key and "\0" not in key:
        topic = slug_for(key)
        assert re.fullmatch(r"[a-z0-9-]+", topic) and portable_name(topic) == topic
    assert portable_name(default_source_name(text)) == default_source_name(text)
