"""Ingest, dedupe, lifecycle, redaction, crash healing and bad input, through the public API."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from tests.helpers import ChatServer, Reply, chat, read_only
from vaultmem import Vault, index
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import (
    FrontmatterError,
    InvalidInput,
    NodeNotFound,
    ReadOnlyVault,
    UnsafePath,
    VaultExists,
    VaultNotFound,
)
from vaultmem.ingest import build_leaves
from vaultmem.model import Message, Status
from vaultmem.summarise import Child


def files(vault: Vault) -> list[Path]:
    return sorted((vault.layout.root / "sources").rglob("*.md"))


def test_ingest_writes_one_file_and_row_per_leaf(vault: Vault) -> None:
    report = vault.ingest_messages(chat(10), source="chat")
    assert len(report.added) == 10
    assert len(files(vault)) == 10
    rows = index.all_rows(vault.conn)
    assert set(rows) == set(report.added)
    for path in files(vault):
        leaf_id = path.stem.rsplit("-", 1)[-1]
        assert rows[leaf_id]["path"] == path.relative_to(vault.layout.root).as_posix()
        assert path.parent.name == "_fresh"
    leaf = vault.get(report.added[3])
    assert leaf.message_ids == ("s1-m3",)
    assert leaf.session == "s1"
    assert leaf.role == "assistant"
    assert leaf.status is Status.PENDING
    assert leaf.ts is not None and leaf.ts.isoformat() == "2024-03-04T10:03:00+00:00"


def test_reingesting_identical_input_creates_nothing(vault: Vault) -> None:
    first = vault.ingest_messages(chat(5), source="chat")
    before = {p: p.stat().st_mtime_ns for p in files(vault)}
    again = vault.ingest_messages(chat(5), source="chat")
    assert again.added == ()
    assert again.duplicates == 5
    assert {p: p.stat().st_mtime_ns for p in files(vault)} == before
    assert len(index.all_rows(vault.conn)) == len(first.added)
    assert vault.jobs.pending() == 5  # one extract job per leaf, not two


def test_plain_role_content_turns_are_stable(vault: Vault) -> None:
    turns = [
        {"role": "user", "content": "Please remember that my dentist is Dr. Alvarez on Main Street."},
        {"role": "assistant", "content": "Noted: your dentist is Dr. Alvarez on Main Street."},
    ]
    a = vault.ingest_messages(turns, source="assistant", session="2024-05-01")
    b = vault.ingest_messages(turns, source="assistant", session="2024-05-01")
    assert len(a.added) == 2 and b.added == ()


def test_low_value_leaves_are_dropped_but_kept(vault: Vault) -> None:
    report = vault.ingest_messages(
        [{"id": "a", "role": "user", "content": "ok"}, {"id": "b", "role": "user", "content": "好的"}],
        source="chat",
    )
    assert report.dropped == 2
    for leaf_id in report.added:
        leaf = vault.get(leaf_id)
        assert leaf.status is Status.DROPPED
        assert "short" in leaf.reasons
        assert (vault.layout.root / leaf.path).exists()


def test_secrets_never_reach_file_or_index(vault: Vault) -> None:
    secret = "sk-proj-9f8e7d6c5b4a39281726354433221100aabb"
    report = vault.ingest_messages(
        [{"id": "k", "role": "user", "content": f"The staging key is {secret}, please keep it handy."}],
        source="ops",
    )
    assert report.redacted == 1
    leaf = vault.get(report.added[0])
    assert secret not in leaf.text and "[REDACTED:" in leaf.text
    assert secret not in (vault.layout.root / leaf.path).read_text()
    assert secret.encode() not in vault.layout.db.read_bytes()
    wal = vault.layout.db.with_name("chunks.db-wal")
    assert not wal.exists() or secret.encode() not in wal.read_bytes()


def test_a_secret_repeated_in_short_fields_is_redacted_in_every_leaf(vault: Vault) -> None:
    # Speaker and session repeat from message to message, so their redaction is remembered per value
    # (redact_field): every leaf must still get the marker and name the kind, in every batch, and so
    # must every file reindex reads back with the secret typed into it by hand.
    secret = "ghp_9f8e7d6c5b4a39281726354433221100aabbCC"
    records = [
        {
            "id": f"r{i}",
            "speaker": f"token {secret}",
            "session": f"deploy {secret}",
            "role": "user",
            "content": f"Turn {i}: the deploy of the billing service moved to Thursday afternoon.",
        }
        for i in range(4)
    ]
    added = [*vault.ingest_messages(records[:2], source="ops").added]
    added += vault.ingest_messages(records[2:], source="ops").added
    assert len(added) == 4
    for leaf_id in added:
        leaf = vault.get(leaf_id)
        assert leaf.speaker == leaf.session.replace("deploy", "token") == "token [REDACTED:github_token]"
        assert "github_token" in leaf.redactions
        assert secret not in (vault.layout.root / leaf.path).read_text()
    first, second = (vault.layout.root / vault.get(i).path for i in added[:2])
    for path in (first, second):
        lines = [
            f"speaker: {secret}" if ln.startswith("speaker: ") else ln for ln in path.read_text().split("\n")
        ]
        path.write_text("\n".join(lines))
    vault.reindex()
    for leaf_id in added[:2]:
        leaf = vault.get(leaf_id)
        assert leaf.speaker == "[REDACTED:github_token]" and "github_token" in leaf.redactions
    vault.close()
    assert secret.encode() not in vault.layout.db.read_bytes()
    wal = vault.layout.db.with_name("chunks.db-wal")
    assert not wal.exists() or secret.encode() not in wal.read_bytes()


def test_leaf_frontmatter_and_index_agree_on_lifecycle(vault: Vault) -> None:
    report = vault.ingest_messages(chat(1), source="chat")
    leaf = vault.get(report.added[0])
    text = (vault.layout.root / leaf.path).read_text()
    assert "status: pending_extraction" in text
    assert index.all_rows(vault.conn)[leaf.id]["status"] == "pending_extraction"


def test_ingest_path_each_format(vault: Vault, tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "team.jsonl").write_text(
        json.dumps({"id": "1", "speaker": "Ana", "content": "The release of Atlas v2.1 slipped to Friday."})
        + "\n"
    )
    (inbox / "notes.md").write_text(
        "# Trip\n\nWe booked the ryokan in Kyoto for April.\n\n## Budget\n\n$1,200 total.\n"
    )
    (inbox / "mail.eml").write_bytes(
        b"From: Bo <bo@example.com>\r\nTo: me@example.com\r\nSubject: Invoice\r\nMessage-ID: <x1@example.com>\r\n"
        b"Date: Tue, 02 Jan 2024 10:00:00 +0000\r\n\r\nThe invoice for March is 450 EUR, due next week.\r\n"
    )
    report = vault.ingest_path(inbox)
    assert report.skipped == ()
    inputs = {vault.get(i).kind.value for i in report.added}
    assert inputs == {"chat", "doc", "email"}
    assert set(report.sources) == {"inbox"}
    email = next(vault.get(i) for i in report.added if vault.get(i).kind.value == "email")
    assert email.meta["subject"] == "Invoice"
    assert email.source_id == "x1@example.com"


def test_crash_between_files_and_rows_is_healed_on_open(vault: Vault) -> None:
    # Simulate a crash after the batch's files were made durable but before the rows committed.
    leaves = build_leaves(
        [
            Message(
                source="chat",
                text=f"Fact number {i} about the lighthouse keeper's logbook.",
                source_id=str(i),
            )
            for i in range(3)
        ],
        vault.layout,
        vault.scorer,
        256,
    )
    from vaultmem import fsio, leaffile
    from vaultmem.ingest import write_intent

    write_intent(vault.layout, new=[leaf.path for leaf in leaves])
    fsio.write_batch_durable(
        vault.layout.root,
        [
            fsio.PendingWrite(vault.layout.abs(leaf.path), leaffile.render_leaf(leaf).encode())
            for leaf in leaves
        ],
    )
    (
        vault.layout.abs(leaves[0].path).parent / f"{fsio.TMP_PREFIX}abc-{Path(leaves[0].path).name}"
    ).write_text("x")
    vault.close()
    reopened = Vault.open(vault.layout.root)
    try:
        assert {leaf.id for leaf in reopened.ls()} == {leaf.id for leaf in leaves}
        assert reopened.jobs.pending() == 3
        assert reopened.check().ok
    finally:
        reopened.close()


def test_init_and_open_errors(tmp_path: Path) -> None:
    with pytest.raises(VaultNotFound, match="vaultmem init"):
        Vault.open(tmp_path / "nothing")
    Vault.init(tmp_path / "v").close()
    with pytest.raises(VaultExists):
        Vault.init(tmp_path / "v")


@pytest.mark.parametrize("source", ["../etc", "/abs", "a/b", "..", "", "x" * 81])
def test_unsafe_source_names_are_refused(vault: Vault, source: str) -> None:
    with pytest.raises(UnsafePath):
        vault.ingest_messages([Message(source=source, text="A fact worth keeping about the harbour.")])
    assert files(vault) == []


@pytest.mark.parametrize("bad_id", ["../../etc/passwd", "abc", "/tmp/x", "0123456789ABCDEF"])
def test_unsafe_ids_are_refused(vault: Vault, bad_id: str) -> None:
    with pytest.raises(UnsafePath):
        vault.get(bad_id)


def test_unknown_id_is_not_found(vault: Vault) -> None:
    with pytest.raises(NodeNotFound):
        vault.get("0123456789abcdef")


def test_bad_files_get_clear_errors_and_change_nothing(vault: Vault, tmp_path: Path) -> None:
    vault.ingest_messages(chat(2), source="chat")
    snapshot = {p: p.read_bytes() for p in files(vault)}
    cases = {
        "binary.md": b"\x00\x01\x02 binary",
        "latin1.txt": b"caf\xe9 au lait",
        "empty.md": b"",
        "broken.json": b'[{"id": 1, ',
        "huge.txt": b"word " * (vault.config.max_file_bytes // 5 + 10),
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(InvalidInput):
            vault.ingest_path(path)
    assert {p: p.read_bytes() for p in files(vault)} == snapshot
    assert vault.check().ok


def test_symlink_out_of_the_tree_is_refused(vault: Vault, tmp_path: Path) -> None:
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "diary.md").write_text("# Secret\n\nNot for the vault.\n")
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "ok.md").write_text("# Fine\n\nThe boat leaves at nine on Saturday.\n")
    (inbox / "link.md").symlink_to(outside / "diary.md")
    report = vault.ingest_path(inbox)
    assert [s.path for s in report.skipped] and "link.md" in report.skipped[0].path
    assert all("Secret" not in vault.get(i).text for i in report.added)


def test_read_only_vault_gives_clear_error_and_loses_nothing(vault: Vault) -> None:
    vault.ingest_messages(chat(2), source="chat")
    snapshot = {p: p.read_bytes() for p in files(vault)}
    fresh = vault.layout.fresh_dir("chat")
    with read_only(fresh), pytest.raises(ReadOnlyVault):
        vault.ingest_messages(chat(3, prefix="Another"), source="chat")
    assert {p: p.read_bytes() for p in files(vault)} == snapshot
    assert len(index.all_rows(vault.conn)) == 2


def test_malformed_frontmatter_in_vault_is_reported_not_lost(vault: Vault) -> None:
    report = vault.ingest_messages(chat(2), source="chat")
    path = vault.layout.root / vault.get(report.added[0]).path
    path.write_text("---\nid: [broken\n---\nthe text a person was editing\n")
    result = vault.check()
    assert [p.code for p in result.problems] == ["invalid_file", "orphan_row"] or {
        p.code for p in result.problems
    } == {"invalid_file", "orphan_row"}
    vault.check(fix=True)
    assert path.read_text().endswith("the text a person was editing\n")  # never rewritten or deleted
    with pytest.raises(FrontmatterError):
        from vaultmem.leaffile import parse_leaf

        parse_leaf(path.read_text(), "x-" + path.name)


def test_crlf_and_bom_leaf_files_are_read(vault: Vault) -> None:
    report = vault.ingest_messages(chat(1), source="chat")
    path = vault.layout.root / vault.get(report.added[0]).path
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    vault.reindex()
    assert vault.get(report.added[0]).text.startswith("Message 0")


def test_stats(vault: Vault) -> None:
    vault.ingest_messages(chat(4), source="chat")
    vault.ingest_messages(chat(2, session="s2", source="mail"))
    s = vault.stats()
    assert s.sources == ("chat", "mail")
    assert s.leaves == 6
    assert s.first_memory == "2024-03-01T10:00:00Z"
    assert s.latest_memory == "2024-03-04T10:03:00Z"
    assert s.storage_bytes > 0
    assert s.jobs["queued"] == 6


def test_storage_counts_files_and_index_apart(vault: Vault) -> None:
    """The walk behind ``stats`` and the dashboard's metrics: the vault's files (not ``.git``, symbolic
    links not followed) and ``.vaultmem/`` (the disk reserve left out), each byte once."""
    from vaultmem.stats import storage

    root, state = vault.layout.root, vault.layout.state
    vault.ingest_messages(chat(3), source="chat")
    vault.close()
    files = [p for p in root.rglob("*") if p.is_file() and state not in p.parents]
    expected_files = sum(p.stat().st_size for p in files)
    expected_index = sum(
        p.stat().st_size for p in state.rglob("*") if p.is_file() and p != vault.layout.reserve
    )
    (root / ".git" / "objects").mkdir(parents=True)
    (root / ".git" / "objects" / "pack").write_bytes(b"x" * 5000)  # git's, not the vault's
    (root / "notes").mkdir()
    (root / "notes" / "todo.md").write_text("buy oat milk\n", encoding="utf-8")
    os.symlink(root / "notes" / "todo.md", root / "notes" / "link.md")  # counted once, as its target
    os.symlink(root / "notes", root / "mirror")
    assert storage(vault.layout) == (expected_files + len("buy oat milk\n"), expected_index)


def test_progress_is_reported(vault: Vault) -> None:
    seen: list[tuple[int, int]] = []
    vault.ingest_messages(chat(3), source="chat", progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (3, 3)


def test_two_vault_handles_do_not_duplicate(tmp_path: Path) -> None:
    a = Vault.init(tmp_path / "v")
    b = Vault.open(tmp_path / "v")
    try:
        a.ingest_messages(chat(3), source="chat")
        assert b.ingest_messages(chat(3), source="chat").added == ()
        assert len(os.listdir(a.layout.fresh_dir("chat"))) == 3
    finally:
        a.close()
        b.close()


def test_write_lock_turns_go_in_arrival_order() -> None:
    import threading
    import time

    from vaultmem.lock import FairRLock

    lock = FairRLock()
    order: list[str] = []
    lock.acquire()
    lock.acquire()  # re-entrant
    waiter = threading.Thread(target=lambda: (lock.acquire(), order.append("B"), lock.release()))
    waiter.start()
    deadline = time.monotonic() + 60  # bounds a hang only
    while not lock._queue and time.monotonic() < deadline:
        time.sleep(0.001)
    assert lock._queue, "the other thread never started waiting"
    lock.release()
    lock.release()
    lock.acquire()  # the releasing thread asks again at once: the waiter goes first
    order.append("A")
    lock.release()
    waiter.join(60)
    assert order == ["B", "A"]


def test_public_surface_is_sorted_and_importable() -> None:
    import vaultmem

    assert vaultmem.__all__ == sorted(vaultmem.__all__)
    for name in vaultmem.__all__:
        assert getattr(vaultmem, name) is not None


def test_temp_files_of_a_writer_that_died_holding_the_lock_are_tidied_on_open(tmp_path: Path) -> None:
    from vaultmem.embed import FakeEmbedder

    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(chat(3))
        fresh = vault.layout.fresh_dir("chat")
    stray = fresh / ".vm-tmp-0123456789ab-_embeddings.json"
    stray.write_text("{half a sidecar")
    (tmp_path / "v" / ".vaultmem" / "writing").touch()  # what a SIGKILLed writer leaves
    with Vault.open(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        assert not stray.exists() and vault.check().ok
        assert not vault.layout.writing.exists()


def test_one_cap_on_llm_calls_in_flight_across_the_summariser_and_the_memory_model(
    tmp_path: Path, server: ChatServer
) -> None:
    """``[llm] max_concurrent`` counts "across all workers": the summariser and the memory tiers' model
    share one cap, so two of them at once never have more calls in flight than it allows."""
    server.replies = [Reply(content='{"ok": true}', delay_s=0.2)]
    config = f'[llm]\nbase_url = "{server.url}"\nmodel = "m"\ntimeout_s = 10.0\nmax_concurrent = 1\n'
    vault = Vault.init(tmp_path / "v", config, embedder=FakeEmbedder())
    summariser, model = vault.summariser, vault.chat_model
    assert model is not None
    children = [Child("Caroline planted roses by the fence on Saturday.", None, speaker="Caroline")]
    start = threading.Barrier(4)

    def summarise() -> None:
        start.wait(timeout=5)
        summariser.summarise(children, 1)

    def ask() -> None:
        start.wait(timeout=5)
        model.ask("system", "user")

    threads = [threading.Thread(target=f) for f in (summarise, ask, summarise, ask)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert len(server.requests) == 4
    assert server.max_active == 1
