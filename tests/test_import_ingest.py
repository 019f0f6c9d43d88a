"""Importing exports through the ingest path: recognised by content, forced with --format, one line
naming the formats tried when nothing matches, ZIP archives read as they are (bombs and escaping
names refused), re-import adds nothing, a newer export adds only its new turns, secrets redacted."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from tests.helpers import run
from tests.secret_shapes import secrets
from vaultmem.errors import InvalidInput, UnknownFormat, UnsafePath
from vaultmem.inputs import archive, read_path
from vaultmem.inputs.sniff import FORMAT_NAMES
from vaultmem.vault import Vault

DATA = Path(__file__).parent / "data" / "exports"
CHATGPT = DATA / "chatgpt" / "conversations.json"
CLAUDE_CODE = DATA / "claudecode" / "1f2e3d4c-5b6a-4798-8a9b-0c1d2e3f4a5b.jsonl"


def zip_of(path: Path, members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def tree_bytes(top: Path, prefix: str = "") -> dict[str, bytes]:
    return {
        prefix + p.relative_to(top).as_posix(): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()
    }


# -- choosing the adapter ------------------------------------------------------------------------


def test_unrecognised_file_gets_one_line_naming_every_format_tried(tmp_path: Path) -> None:
    odd = tmp_path / "settings.json"
    odd.write_text('{"theme": "dark", "fontSize": 14}', encoding="utf-8")
    with pytest.raises(UnknownFormat) as info:
        read_path(odd)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{odd}: ")
    assert all(name in message for name in FORMAT_NAMES) and "--format" in message
    csv = tmp_path / "export.csv"
    csv.write_text("date,amount\n2026-03-02,12\n", encoding="utf-8")
    with pytest.raises(UnknownFormat, match=r"unsupported file type '\.csv'; tried chatgpt, claude"):
        read_path(csv)


def test_format_forces_an_adapter_and_unknown_names_are_refused(tmp_path: Path) -> None:
    # content wins over the suffix; --format wins over the content
    note = tmp_path / "chat.md"
    shutil.copy(DATA / "whatsapp" / "WhatsApp-Chat mit Jonas.txt", note)
    assert [m.speaker for m in read_path(note).messages] == ["Jonas", "Mara Lind"]
    assert {m.kind.value for m in read_path(note, fmt="markdown").messages} == {"doc"}
    log = tmp_path / "session.log"
    shutil.copy(CLAUDE_CODE, log)
    assert len(read_path(log).messages) == 4  # any suffix: the content says what it is
    with pytest.raises(InvalidInput, match=r"unknown format 'chatgtp': choose one of chatgpt, claude"):
        read_path(note, fmt="chatgtp")
    # forcing the wrong adapter fails in one line too
    with pytest.raises(InvalidInput, match="a ChatGPT export is a list of conversations"):
        read_path(DATA / "telegram" / "result.json", fmt="chatgpt")


def test_a_directory_of_claude_code_projects_takes_each_project_as_source(tmp_path: Path) -> None:
    projects = tmp_path / ".claude" / "projects"
    (projects / "-home-mara-src-tidepool").mkdir(parents=True)
    shutil.copy(CLAUDE_CODE, projects / "-home-mara-src-tidepool" / CLAUDE_CODE.name)
    (projects / "-home-mara-src-harbor").mkdir()
    other = CLAUDE_CODE.read_text(encoding="utf-8").replace(
        "/home/mara/src/tidepool", "/home/mara/src/harbor"
    )
    (projects / "-home-mara-src-harbor" / "9e8d7c6b.jsonl").write_text(
        other.replace("1f2e3d4c-5b6a-4798-8a9b-0c1d2e3f4a5b", "9e8d7c6b"), encoding="utf-8"
    )
    result = read_path(projects)
    assert result.skipped == []
    assert sorted({m.source for m in result.messages}) == ["harbor", "tidepool"]
    assert {m.meta["file"] for m in result.messages} == {
        f"-home-mara-src-tidepool/{CLAUDE_CODE.name}",
        "-home-mara-src-harbor/9e8d7c6b.jsonl",
    }


def test_export_folder_files_no_adapter_reads_are_skipped_with_the_line(tmp_path: Path) -> None:
    result = read_path(DATA / "claude")
    assert len(result.messages) == 5
    reasons = {Path(s.path).name: s.reason for s in result.skipped}
    assert set(reasons) == {"projects.json", "users.json"}
    assert all("none recognises it" in r for r in reasons.values())


def test_large_exports_are_read_beyond_the_file_limit_other_files_are_not(tmp_path: Path) -> None:
    limit = CHATGPT.stat().st_size - 1
    assert len(read_path(CHATGPT, max_bytes=limit, max_export_bytes=10 * limit).messages) == 9
    with pytest.raises(InvalidInput, match="over the"):
        read_path(CHATGPT, max_bytes=limit, max_export_bytes=limit)
    big = tmp_path / "big.md"
    big.write_text("# notes\n\n" + "harbour " * 2000, encoding="utf-8")
    with pytest.raises(InvalidInput, match="over the 1000-byte limit"):
        read_path(big, max_bytes=1000, max_export_bytes=10**9)


# -- ZIP archives --------------------------------------------------------------------------------


def test_zip_exports_are_read_as_they_are(tmp_path: Path) -> None:
    chatgpt_zip = zip_of(
        tmp_path / "chatgpt-export.zip",
        {
            "conversations.json": CHATGPT.read_bytes(),
            "user.json": b'{"id": "user-1", "email": "mara@example.org"}',
            "chat.html": b"<html><body>...</body></html>",
            "file-7QmXr2-ryokan-booking.png": b"\x89PNG\r\n\x1a\n" + bytes(200),
            "__MACOSX/._conversations.json": b"\x00\x05\x16\x07",
        },
    )
    result = read_path(chatgpt_zip)
    assert len(result.messages) == 9 and {m.source for m in result.messages} == {"chatgpt"}
    assert {m.meta["file"] for m in result.messages} == {"chatgpt-export.zip/conversations.json"}
    assert result.skipped[0].reason == "2 media or other files in the archive not read"
    assert result.skipped[1].path.endswith("chatgpt-export.zip/user.json")
    assert "none recognises it" in result.skipped[1].reason

    slack_zip = zip_of(tmp_path / "Harbor Slack export Mar 2026.zip", tree_bytes(DATA / "slack", "Harbor/"))
    slack = read_path(slack_zip).messages
    assert len(slack) == 7 and {m.session for m in slack} == {
        "#general",
        "#harbor-dev",
        "#dm-Mara Lind-Priya Nair",
    }

    wa_zip = zip_of(
        tmp_path / "WhatsApp Chat - Harbour walk.zip",
        {
            "_chat.txt": (DATA / "whatsapp" / "WhatsApp Chat - Harbour walk.txt").read_bytes(),
            "00000012-PHOTO.jpg": b"\xff\xd8",
        },
    )
    wa = read_path(wa_zip).messages
    assert len(wa) == 5 and {m.session for m in wa} == {"Harbour walk"}


def test_zip_member_leaving_the_archive_is_refused(tmp_path: Path) -> None:
    evil = zip_of(tmp_path / "evil.zip", {"../../outside/conversations.json": CHATGPT.read_bytes()})
    with pytest.raises(UnsafePath, match="would leave the archive"):
        read_path(evil)
    absolute = zip_of(tmp_path / "abs.zip", {"/etc/conversations.json": CHATGPT.read_bytes()})
    with pytest.raises(UnsafePath, match="would leave the archive"):
        read_path(absolute)
    assert not (tmp_path.parent / "outside").exists()


def test_zip_bomb_is_refused_without_expanding_it(tmp_path: Path) -> None:
    bomb = zip_of(tmp_path / "bomb.zip", {"conversations.json": b"[" + b" " * (64 * 1024 * 1024) + b"]"})
    assert bomb.stat().st_size < 200_000
    with pytest.raises(InvalidInput, match="zip bomb"):
        read_path(bomb, max_export_bytes=1 << 30)
    with pytest.raises(InvalidInput, match="expands past the byte limit"):
        archive.read_zip(bomb.read_bytes(), "bomb.zip", 4 << 20)


def test_corrupt_zip_is_one_clear_error(tmp_path: Path) -> None:
    good = zip_of(tmp_path / "x.zip", {"conversations.json": CHATGPT.read_bytes()}).read_bytes()
    broken = tmp_path / "broken.zip"
    broken.write_bytes(good[:200])
    with pytest.raises(InvalidInput, match=r"broken\.zip: not a readable ZIP archive"):
        read_path(broken)


# -- through the vault: re-import, newer exports, secrets -----------------------------------------


def test_reimport_adds_nothing_and_a_newer_export_adds_only_new_turns(vault: Vault, tmp_path: Path) -> None:
    first = vault.ingest_path(CHATGPT)
    assert first.messages == 9 and len(first.added) + first.dropped >= 1 and first.sources == ("chatgpt",)
    leaves = {leaf.id for leaf in vault.ls()}
    again = vault.ingest_path(CHATGPT)
    assert again.added == () and again.duplicates == 9
    # a month later: the same conversations (one continued), one new conversation, in a ZIP
    doc = json.loads(CHATGPT.read_text(encoding="utf-8"))
    tram = doc[2]
    tram["mapping"]["b4"]["children"] = ["b5"]
    tram["mapping"]["b5"] = {
        "id": "b5",
        "parent": "b4",
        "children": [],
        "message": {
            "id": "b5",
            "author": {"role": "user"},
            "create_time": 1772640000,
            "content": {
                "content_type": "text",
                "parts": ["Remember that the 28E stop at Martim Moniz moved 50 m uphill."],
            },
            "metadata": {},
        },
    }
    tram["current_node"] = "b5"
    newer = zip_of(tmp_path / "export-april.zip", {"conversations.json": json.dumps(doc).encode()})
    report = vault.ingest_path(newer)
    assert report.messages == 10 and report.duplicates == 9 and len(report.added) == 1
    (new_leaf,) = [leaf for leaf in vault.ls() if leaf.id not in leaves]
    assert new_leaf.source_id == "b5" and "Martim Moniz" in new_leaf.text


def test_growing_coding_sessions_add_only_their_new_turns(vault: Vault, tmp_path: Path) -> None:
    session = tmp_path / "projects" / "-home-mara-src-tidepool" / CLAUDE_CODE.name
    session.parent.mkdir(parents=True)
    lines = CLAUDE_CODE.read_text(encoding="utf-8").splitlines(keepends=True)
    session.write_text("".join(lines[:15]), encoding="utf-8")  # up to the end of the first answer
    first = vault.ingest_path(session.parent)
    assert first.messages == 2
    session.write_text("".join(lines), encoding="utf-8")  # the session went on
    later = vault.ingest_path(session.parent)
    assert later.messages == 4 and later.duplicates == 2 and later.sources == ("tidepool",)
    assert vault.ingest_path(session.parent).duplicates == 4

    rollout = next((DATA / "codex").rglob("rollout-*.jsonl"))
    grow = tmp_path / "sessions" / rollout.name
    grow.parent.mkdir()
    codex_lines = rollout.read_text(encoding="utf-8").splitlines(keepends=True)
    grow.write_text("".join(codex_lines[:13]), encoding="utf-8")
    assert vault.ingest_path(grow).messages == 2
    grow.write_text("".join(codex_lines), encoding="utf-8")
    report = vault.ingest_path(grow)
    assert report.messages == 4 and report.duplicates == 2


def test_secrets_in_exports_are_redacted_everywhere(vault: Vault, tmp_path: Path) -> None:
    _kind, statement, secret = next(s for s in secrets(7) if s[0] == "openai_project_key")
    doc = json.loads(CHATGPT.read_text(encoding="utf-8"))
    doc[0]["title"] = f"key {secret}"
    doc[0]["mapping"]["c1-u2"]["message"]["content"]["parts"] = [statement]
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps(doc), encoding="utf-8")
    claude = json.loads((DATA / "claude" / "conversations.json").read_text(encoding="utf-8"))
    claude[1]["chat_messages"][0]["text"] = f"我的密钥是 {secret}，请记住"
    (tmp_path / "claude").mkdir()
    (tmp_path / "claude" / "conversations.json").write_text(
        json.dumps(claude, ensure_ascii=False), encoding="utf-8"
    )
    report = vault.ingest_path(export)
    report2 = vault.ingest_path(tmp_path / "claude")
    assert report.redacted >= 1 and report2.redacted >= 1
    for file in (vault.layout.root / "sources").rglob("*.md"):
        assert secret not in file.read_text(encoding="utf-8")
    assert not any(secret in leaf.text or secret in str(leaf.meta) for leaf in vault.ls())


def test_cli_ingest_with_format_all_branches_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "v"
    assert run(["init", str(root)], capsys)[0] == 0
    code, out, _ = run(["ingest", str(CHATGPT), "--all-branches", "--json", "--vault", str(root)], capsys)
    assert code == 0
    body = json.loads(out)
    assert body["messages"] == 12 and body["sources"] == ["chatgpt"]
    code, out, _ = run(["ingest", str(CHATGPT), "--json", "--vault", str(root)], capsys)
    assert json.loads(out)["added"] == 0 and json.loads(out)["duplicates"] == 9
    odd = tmp_path / "settings.json"
    odd.write_text('{"theme": "dark"}', encoding="utf-8")
    code, out, err = run(["ingest", str(odd), "--vault", str(root)], capsys)
    assert code == 1 and err.count("\n") == 1 and "none recognises it" in err
    code, _, err = run(["ingest", str(odd), "--format", "nope", "--vault", str(root)], capsys)
    assert code == 1 and "unknown format 'nope'" in err
    code, out, _ = run(
        ["ingest", str(DATA / "telegram" / "result.json"), "-f", "telegram", "--vault", str(root)], capsys
    )
    assert code == 0 and "in telegram" in out


def test_archive_reader_reads_in_memory_and_names_members() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a/b.json", b"[]")
        z.writestr("a/", b"")
        z.writestr("a/.hidden.json", b"[]")
        z.writestr("voice.opus", b"OggS")
    got = archive.read_zip(buf.getvalue(), "x.zip", 1 << 20)
    assert [f.name for f in got.files] == ["a/b.json"] and got.left_out == 1
    assert got.names == ["a/b.json", "voice.opus"]
