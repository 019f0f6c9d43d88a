"""Dispatcher: real files and folders in tmp_path go to the right adapter, or are refused or skipped."""

from __future__ import annotations

import json
import mailbox
import os
from email.message import EmailMessage
from pathlib import Path

import pytest

from vaultmem.canon import CanonResult, Skipped, read_path
from vaultmem.errors import InvalidInput, UnsafePath
from vaultmem.model import InputKind


def _eml(subject: str, body: str, msg_id: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "Ana <ana@example.com>"
    msg["Subject"] = subject
    msg["Message-ID"] = msg_id
    msg.set_content(body)
    return msg


def _write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "My Notes"
    _write(root / "a_chat.json", json.dumps([{"role": "user", "content": "I prefer tea."}]))
    _write(root / "b_log.jsonl", '{"role": "assistant", "content": "Noted."}\n')
    _write(root / "c.eml", bytes(_eml("Hello", "Mail body.", "<e1@x>")))
    _write(root / "docs" / "plan.md", "# Plan\nShip it.\n")
    _write(root / "docs" / "readme.txt", "Plain words.")
    _write(root / "photo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    _write(root / "blob.md", b"looks like text\x00\x01\x02")
    _write(root / "latin.md", "Olá mundo".encode("latin-1"))
    _write(root / "empty.txt", b"")
    _write(root / "notes.csv", "a,b\n1,2\n")
    _write(root / ".git" / "HEAD.md", "# not me")
    _write(root / ".obsidian" / "workspace.json", '[{"content": "not me"}]')
    _write(root / ".hidden.md", "# hidden")
    box = mailbox.mbox(root / "Inbox")
    box.add(_eml("Boxed", "From the mailbox.", "<b1@x>"))
    box.close()
    return root


def test_directory_walk_dispatches_by_suffix_in_sorted_order(tree: Path) -> None:
    result = read_path(tree)
    assert isinstance(result, CanonResult)
    assert [(m.kind, m.text) for m in result.messages] == [
        (InputKind.EMAIL, "Subject: Boxed\n\nFrom the mailbox."),  # "Inbox" sorts first: capital I
        (InputKind.CHAT, "I prefer tea."),
        (InputKind.CHAT, "Noted."),
        (InputKind.EMAIL, "Subject: Hello\n\nMail body."),
        (InputKind.DOC, "# Plan\n\nShip it."),
        (InputKind.DOC, "Plain words."),
    ]
    assert {m.source for m in result.messages} == {"my-notes"}
    files = [m.meta["file"] for m in result.messages]
    assert files == ["Inbox", "a_chat.json", "b_log.jsonl", "c.eml", "docs/plan.md", "docs/readme.txt"]
    assert result.messages[4].source_id == "docs/plan.md#1"
    assert result.messages[1].source_id == "a_chat#0"


def test_directory_walk_skips_bad_files_with_reasons(tree: Path) -> None:
    result = read_path(tree)
    reasons = {Path(s.path).name: s.reason for s in result.skipped}
    assert set(reasons) == {"blob.md", "empty.txt", "latin.md", "notes.csv", "photo.png"}
    assert "binary" in reasons["blob.md"]
    assert "binary" in reasons["photo.png"]
    assert "nothing to ingest" in reasons["empty.txt"]
    assert "not valid UTF-8" in reasons["latin.md"]
    assert "unsupported file type '.csv'" in reasons["notes.csv"]
    assert all(isinstance(s, Skipped) for s in result.skipped)
    assert not any("not me" in m.text or "hidden" in m.text for m in result.messages)


def test_oversize_file_is_skipped_in_walk_and_refused_directly(tmp_path: Path) -> None:
    big = _write(tmp_path / "d" / "big.md", "x" * 2000)
    _write(tmp_path / "d" / "small.md", "small")
    result = read_path(tmp_path / "d", max_bytes=1000)
    assert [m.text for m in result.messages] == ["small"]
    assert [(Path(s.path).name, "limit" in s.reason) for s in result.skipped] == [("big.md", True)]
    with pytest.raises(InvalidInput, match="over the 1000-byte limit"):
        read_path(big, max_bytes=1000)


@pytest.mark.parametrize(
    ("name", "data", "pattern"),
    [
        ("bin.txt", b"abc\x00def", "binary"),
        ("bad.md", b"caf\xe9", "not valid UTF-8"),
        ("pic.gif", b"GIF89a", "unsupported file type"),
        ("empty.md", b"", "nothing to ingest"),
        ("blank.md", b"\n  \n", "nothing to ingest"),
        ("empty.json", b"[]", "nothing to ingest"),
    ],
)
def test_direct_file_problems_raise(tmp_path: Path, name: str, data: bytes, pattern: str) -> None:
    with pytest.raises(InvalidInput, match=pattern):
        read_path(_write(tmp_path / name, data))


def test_missing_path_raises(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no such file"):
        read_path(tmp_path / "missing.md")


def test_symlink_outside_root(tmp_path: Path) -> None:
    secret = _write(tmp_path / "secret" / "id_rsa.txt", "PRIVATE KEY")
    inbox = tmp_path / "inbox"
    _write(inbox / "ok.md", "fine")
    (inbox / "leak.txt").symlink_to(secret)
    (inbox / "alias.md").symlink_to(inbox / "ok.md")
    (inbox / "elsewhere").symlink_to(secret.parent, target_is_directory=True)
    result = read_path(inbox)
    assert [m.text for m in result.messages] == ["fine", "fine"]  # alias.md is inside: allowed
    reasons = {Path(s.path).name: s.reason for s in result.skipped}
    assert set(reasons) == {"leak.txt", "elsewhere"}
    assert "outside" in reasons["leak.txt"]
    assert "outside" in reasons["elsewhere"]
    assert not any("PRIVATE" in m.text for m in result.messages)
    with pytest.raises(UnsafePath, match="outside"):
        read_path(inbox / "leak.txt")
    assert read_path(inbox / "leak.txt", root=tmp_path).messages[0].text == "PRIVATE KEY"


def test_symlinked_directory_inside_root_is_not_followed(tmp_path: Path) -> None:
    _write(tmp_path / "real" / "a.md", "once")
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    result = read_path(tmp_path)
    assert [m.text for m in result.messages] == ["once"]
    assert [(Path(s.path).name, s.reason) for s in result.skipped] == [
        ("link", "symlinked directory not followed")
    ]


def test_file_outside_given_root_is_refused(tmp_path: Path) -> None:
    outside = _write(tmp_path / "other" / "x.md", "x")
    with pytest.raises(UnsafePath):
        read_path(outside, root=tmp_path / "vault-inbox")


def test_bom_and_crlf_markdown(tmp_path: Path) -> None:
    path = _write(tmp_path / "Meeting Notes.md", b"\xef\xbb\xbf# Title\r\nline one\r\nline two\r\n")
    result = read_path(path)
    assert result.skipped == []
    (message,) = result.messages
    assert message.text == "# Title\n\nline one\nline two"
    assert message.source == "meeting-notes"
    assert message.meta["file"] == "Meeting Notes.md"


def test_source_argument_is_validated_and_used(tmp_path: Path) -> None:
    path = _write(tmp_path / "n.txt", "hello")
    assert read_path(path, source="journal").messages[0].source == "journal"
    with pytest.raises(UnsafePath):
        read_path(path, source="../journal")


def test_direct_email_and_mbox_files(tmp_path: Path) -> None:
    eml = _write(tmp_path / "one.eml", bytes(_eml("Q3", "Numbers are in.", "<q3@x>")))
    (message,) = read_path(eml).messages
    assert message.kind is InputKind.EMAIL
    assert message.source_id == "q3@x"
    assert message.meta["file"] == "one.eml"
    box = mailbox.mbox(tmp_path / "archive.mbox")
    for i in range(3):
        box.add(_eml(f"n{i}", f"body {i}", f"<n{i}@x>"))
    box.close()
    assert [m.source_id for m in read_path(tmp_path / "archive.mbox").messages] == ["n0@x", "n1@x", "n2@x"]


def test_fifo_is_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "d" / "pipe.md"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    with pytest.raises(InvalidInput, match="not a regular file"):
        read_path(fifo)
    assert [(Path(s.path).name, s.reason) for s in read_path(tmp_path / "d").skipped] == [
        ("pipe.md", "not a regular file")
    ]
