"""Dispatcher: real files and folders in tmp_path go to the right adapter, or are refused or skipped."""

from __future__ import annotations

import codecs
import json
import mailbox
import os
from email.message import EmailMessage
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import run
from vaultmem.errors import InvalidInput, UnsafePath
from vaultmem.inputs import CanonResult, Skipped, read_path
from vaultmem.inputs.email import split_mbox
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


# -- UTF-16 and UTF-32 input -------------------------------------------------------------------------

STANDUP = (
    "# Stand-up 3 March\r\n\r\nAndré: the export format is behind a flag.\r\n王伟：杭州的构建机已修好。\r\n"
)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("notepad.md", codecs.BOM_UTF16_LE + STANDUP.encode("utf-16-le")),  # Notepad "Unicode"
        ("big-endian.md", codecs.BOM_UTF16_BE + STANDUP.encode("utf-16-be")),
        ("utf32.md", STANDUP.encode("utf-32")),  # with its byte-order mark
        ("no-bom.md", STANDUP.encode("utf-16-le")),  # ASCII-heavy UTF-16 without a mark
        ("no-bom-be.md", STANDUP.encode("utf-16-be")),
    ],
)
def test_utf16_and_utf32_text_is_decoded(tmp_path: Path, name: str, data: bytes) -> None:
    (message,) = read_path(_write(tmp_path / name, data)).messages
    assert (
        message.text
        == "# Stand-up 3 March\n\nAndré: the export format is behind a flag.\n王伟：杭州的构建机已修好。"
    )


def test_utf16_chat_export_and_mailbox_are_decoded(tmp_path: Path) -> None:
    chat = json.dumps([{"speaker": "Mara", "content": "Café at 10? 好的"}], ensure_ascii=False)
    assert [m.text for m in read_path(_write(tmp_path / "chat.json", chat.encode("utf-16"))).messages] == [
        "Café at 10? 好的"
    ]
    box = mailbox.mbox(tmp_path / "plain.mbox")
    box.add(_eml("Kickoff", "Monday at nine.", "<k1@x>"))
    box.close()
    wide = _write(tmp_path / "Inbox", (tmp_path / "plain.mbox").read_bytes().decode().encode("utf-16"))
    assert [m.text for m in read_path(wide).messages] == ["Subject: Kickoff\n\nMonday at nine."]


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (
            codecs.BOM_UTF16_LE + "ok".encode("utf-16-le") + b"\x00\xd8",
            "UTF-16 byte-order mark but is not valid",
        ),
        ("plain text here".encode("utf-16-le")[:-1], "looks like UTF-16 without a byte-order mark"),
        (b"\x01\x00\x02\x00\x03\x00\x04\x00\x05\x00", "looks like UTF-16 without a byte-order mark"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00", "binary"),
    ],
)
def test_bad_wide_text_is_refused_clearly(tmp_path: Path, data: bytes, pattern: str) -> None:
    with pytest.raises(InvalidInput, match=pattern):
        read_path(_write(tmp_path / "note.txt", data))


_MBOX_LINES = st.sampled_from(
    [
        "From ana@x Tue Mar  3 08:55:00 2026\n",
        "From: Ana <a@x>\n",
        "Subject: s\n",
        "\n",
        "\r\n",
        "body\n",
        ">From me\n",
        "tail",
    ]
)


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(_MBOX_LINES, max_size=30))
def test_split_mbox_cuts_as_the_mailbox_module_does(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str]
) -> None:
    data = "".join(lines).encode()
    path = tmp_path_factory.mktemp("mbox") / "box"
    path.write_bytes(data)
    box = mailbox.mbox(path, create=False)
    try:
        expected = [box.get_bytes(key) for key in box.iterkeys()]
    finally:
        box.close()
    assert split_mbox(data) == expected


def test_windows_utf16_exports_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What Windows tools write: Notepad's "Unicode" (UTF-16 LE with a mark, CRLF), a PowerShell
    redirect of a chat export, a UTF-16 text file with no mark at all."""
    exports = tmp_path / "exports"
    _write(exports / "standup.md", codecs.BOM_UTF16_LE + STANDUP.encode("utf-16-le"))
    chat = json.dumps([{"speaker": "Mara", "content": "Book the 06:40 train to Porto."}], ensure_ascii=False)
    _write(exports / "chat.json", chat.encode("utf-16"))
    _write(exports / "todo.txt", "Renew the passport before April.\r\n".encode("utf-16-le"))
    vault = tmp_path / "vault"
    assert run(["init", str(vault)], capsys)[0] == 0
    code, out, err = run(["ingest", str(exports), "--json", "--vault", str(vault)], capsys)
    report = json.loads(out)
    assert code == 0 and report["skipped"] == [] and report["added"] == 3, err
    _, out, _ = run(["ls", "--json", "--vault", str(vault)], capsys)
    texts = sorted(leaf["text"] for leaf in json.loads(out))
    assert texts == [
        "# Stand-up 3 March\n\nAndré: the export format is behind a flag.\n王伟：杭州的构建机已修好。",
        "# todo\n\nRenew the passport before April.",  # a document's leaf starts with its title
        "Book the 06:40 train to Porto.",
    ]
