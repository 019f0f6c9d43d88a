"""The agent-memory commands: core (show, edit, add, search), onboard, sessions (end), episodes (record),
recipes (for, report), each with --json and one-line errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import run
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault

CONFIG = '[embed]\nmodel = "fake"\n\n[recipes]\nsimilarity = 0.45\n'


@pytest.fixture
def v(tmp_path: Path) -> str:
    Vault.init(tmp_path / "v", CONFIG, embedder=FakeEmbedder()).close()
    return str(tmp_path / "v")


def as_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> object:
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def test_onboard_with_options_then_core_shows_the_block(v: str, capsys: pytest.CaptureFixture[str]) -> None:
    result = as_json(["onboard", "-V", v, "--name", "Mara", "--language", "Deutsch"], capsys)
    assert (
        isinstance(result, dict)
        and result["answered"] == ["name", "language"]
        and result["skipped"] == ["use"]
    )
    code, out, _ = run(["core", "-V", v], capsys)
    assert code == 0 and "## User profile" in out and "Name: Mara" in out and "block: " in out
    data = as_json(["core", "-V", v], capsys)
    assert isinstance(data, dict) and data["block"]["chars"] <= 4000
    assert [f["name"] for f in data["files"]][:4] == ["soul", "user-profile", "projects", "patterns"]
    code, out, _ = run(["onboard", "-V", v, "--skip"], capsys)
    assert code == 0 and "skipped: name, language, use" in out


def test_core_add_show_search(v: str, capsys: pytest.CaptureFixture[str]) -> None:
    added = as_json(["core", "add", "projects", "Tidepool", "v2", "ships", "in", "May", "-V", v], capsys)
    assert (
        isinstance(added, dict) and added["added"] == ["Tidepool v2 ships in May"] and added["by"] == "policy"
    )
    shown = as_json(["core", "show", "projects", "-V", v], capsys)
    assert isinstance(shown, dict) and shown["entries"][0]["text"] == "Tidepool v2 ships in May"
    code, out, _ = run(["core", "show", "projects", "-V", v], capsys)
    assert code == 0 and out.startswith("# Projects  (core/projects.md:")
    hits = as_json(["core", "search", "Tidepool", "-V", v], capsys)
    assert isinstance(hits, list) and hits[0]["path"] == "core/projects.md"
    code, _, err = run(["core", "add", "../x", "hi", "-V", v], capsys)
    assert code == 1 and err.startswith("vaultmem: error: '../x' is not a core file name")


def test_core_edit_runs_the_editor_and_indexes_the_edit(
    v: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import sys\nwith open(sys.argv[1], 'a', encoding='utf-8') as fh:\n"
        "    fh.write('- [2026-01] Prefers the zanzibar ferry.\\n')\n"
    )
    monkeypatch.setenv("EDITOR", f"{sys.executable} {editor}")
    monkeypatch.delenv("VISUAL", raising=False)
    result = as_json(["core", "edit", "user-profile", "-V", v], capsys)
    assert isinstance(result, dict) and result["entries"] == [
        {"tag": "2026-01", "text": "Prefers the zanzibar ferry."}
    ]
    hits = as_json(["core", "search", "zanzibar", "-V", v], capsys)
    assert isinstance(hits, list) and len(hits) == 1
    monkeypatch.setenv("EDITOR", f"{sys.executable} -c 'import sys; sys.exit(3)'")
    code, _, err = run(["core", "edit", "soul", "-V", v], capsys)
    assert code == 1 and "exited with status 3" in err
    monkeypatch.delenv("EDITOR")
    code, _, err = run(["core", "edit", "-V", v], capsys)
    assert code == 1 and "set $EDITOR" in err


def test_sessions_end_and_list(v: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chat = tmp_path / "chat.jsonl"
    chat.write_text(
        "\n".join(
            json.dumps(m)
            for m in [
                {
                    "id": "1",
                    "speaker": "Mara",
                    "content": "I prefer aisle seats on long flights.",
                    "session": "s1",
                },
                {
                    "id": "2",
                    "role": "assistant",
                    "content": "Noted, aisle seats from now on.",
                    "session": "s1",
                },
            ]
        )
    )
    assert run(["ingest", str(chat), "--source", "chat", "-V", v], capsys)[0] == 0
    note = as_json(["sessions", "end", "s1", "-V", v], capsys)
    assert isinstance(note, dict) and note["messages"] == 2
    assert "user-profile: Mara: I prefer aisle seats on long flights." in note["remembered"]
    listed = as_json(["sessions", "-V", v], capsys)
    assert isinstance(listed, list) and [n["session"] for n in listed] == ["s1"]
    found = as_json(["sessions", "--search", "aisle", "-V", v], capsys)
    assert isinstance(found, list) and found[0]["kind"] == "session"
    code, _, err = run(["sessions", "end", "nope", "-V", v], capsys)
    assert code == 1 and "no messages in session 'nope'" in err


def test_episodes_record_promote_and_recipes(v: str, capsys: pytest.CaptureFixture[str]) -> None:
    for city in ("Kyoto", "Nara", "Osaka"):
        record = as_json(
            ["episodes", "record", f"Book a train ticket to {city} on Friday", "--tool", "search_trains",
             "--outcome", "3 found", "--tool", "book_ticket", "--outcome", "booked", "-V", v],
            capsys,
        )  # fmt: skip
    assert isinstance(record, dict) and record["outcome"] == "promoted"
    name = record["recipe"]["name"]
    listed = as_json(["episodes", "-V", v], capsys)
    assert isinstance(listed, list) and len(listed) == 3
    code, out, _ = run(["recipes", "-V", v], capsys)
    assert code == 0 and name in out and "fast path" in out
    found = as_json(["recipes", "for", "book a train to Lyon", "-V", v], capsys)
    assert isinstance(found, dict) and found["recipes"][0]["name"] == name and found["chars"] <= 2000
    code, out, _ = run(["recipes", "for", "book a train to Lyon", "-V", v], capsys)
    assert code == 0 and out.startswith("## Recipe: ")
    counted = as_json(["recipes", "report", name, "--failed", "-V", v], capsys)
    assert isinstance(counted, dict) and counted["failure_count"] == 1
    failed = as_json(["episodes", "--failed", "-V", v], capsys)
    assert failed == []
    code, _, err = run(["recipes", "report", "nope", "-V", v], capsys)
    assert code == 1 and "no recipe named 'nope'" in err


def test_every_memory_command_takes_json() -> None:
    from vaultmem.cli import app, help_text

    groups = {g.name: g.typer_instance for g in app.registered_groups}
    for group in ("core", "sessions", "episodes", "recipes"):
        names = [group, *(f"{group} {c.name}" for c in groups[group].registered_commands)]
        for name in [*names, "onboard"]:
            assert "--json" in help_text(name), name
