"""reindex rebuilds identical rows; check reports each broken invariant and --fix repairs it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import chat
from vaultmem import Vault, index
from vaultmem.fsio import TMP_PREFIX


@pytest.fixture
def filled(vault: Vault) -> Vault:
    vault.ingest_messages(chat(12), source="chat")
    vault.ingest_messages(chat(5, source="mail", session="t1", prefix="Email"))
    return vault


def codes(vault: Vault) -> list[str]:
    return sorted(p.code for p in vault.check().problems)


def leaf_path(vault: Vault, n: int = 0) -> Path:
    return vault.layout.root / vault.ls()[n].path


def test_reindex_gives_the_same_rows(filled: Vault) -> None:
    before = index.all_rows(filled.conn)
    report = filled.reindex()
    assert report.leaves == 17
    assert index.all_rows(filled.conn) == before
    assert filled.check().ok


def test_reindex_from_a_deleted_database(filled: Vault) -> None:
    before = index.all_rows(filled.conn)
    root = filled.layout.root
    filled.close()
    for name in ("chunks.db", "chunks.db-wal", "chunks.db-shm"):
        (root / ".vaultmem" / name).unlink(missing_ok=True)
    with Vault.open(root) as fresh:
        fresh.reindex()
        assert index.all_rows(fresh.conn) == before
        assert fresh.jobs.pending() == 17  # pending leaves get their extract work back


def test_clean_vault_checks_ok(filled: Vault) -> None:
    assert filled.check().ok
    assert filled.check().leaves == 17


def test_missing_row(filled: Vault) -> None:
    victim = filled.ls()[0]
    filled.conn.execute("DELETE FROM chunks WHERE id = ?", (victim.id,))
    assert codes(filled) == ["missing_row"]
    filled.check(fix=True)
    assert filled.check().ok
    assert filled.get(victim.id).text == victim.text


def test_orphan_row(filled: Vault) -> None:
    path = leaf_path(filled)
    path.unlink()
    assert codes(filled) == ["orphan_row"]
    filled.check(fix=True)
    assert filled.check().ok
    assert len(filled.ls()) == 16


def test_stale_row_after_hand_edit(filled: Vault) -> None:
    leaf = filled.ls()[0]
    path = filled.layout.root / leaf.path
    path.write_text(path.read_text().replace(leaf.text, "A person corrected this memory by hand."))
    assert codes(filled) == ["stale_row"]
    filled.check(fix=True)
    assert filled.get(leaf.id).text == "A person corrected this memory by hand."
    assert filled.check().ok


def test_moved_file_keeps_its_id(filled: Vault) -> None:
    leaf = filled.ls()[0]
    src = filled.layout.root / leaf.path
    dst = filled.layout.root / "sources" / leaf.source / "archive" / src.name
    dst.parent.mkdir(parents=True)
    shutil.move(src, dst)
    assert codes(filled) == ["stale_row"]
    filled.check(fix=True)
    moved = filled.get(leaf.id)
    assert moved.path.endswith(f"archive/{src.name}")
    assert filled.check().ok


def test_invalid_file_and_duplicate_id(filled: Vault) -> None:
    src = leaf_path(filled)
    copy = src.parent.parent / "copy" / src.name
    copy.parent.mkdir()
    shutil.copy(src, copy)
    bad = src.parent / "notes-without-id.md"
    bad.write_text("# just a note\n")
    found = codes(filled)
    assert found == ["duplicate_id", "invalid_file"]
    report = filled.check(fix=True)
    assert not report.ok  # the invalid file is the person's to mend
    assert [p.code for p in report.problems] == ["invalid_file"] and bad.exists()
    # The identical copy is set aside, not deleted; the leaf stays where it is indexed.
    assert [p.code for p in report.fixed] == ["duplicate_id"] and not copy.exists()
    assert [p.name for p in (filled.layout.state / "duplicates").rglob("*.md")] == [src.name]
    assert src.exists() and codes(filled) == ["invalid_file"]


def test_name_must_match_id(filled: Vault) -> None:
    src = leaf_path(filled)
    other = filled.ls()[1].id
    src.rename(src.with_name(src.name.replace(src.stem.rsplit("-", 1)[-1], other[:-1] + "0")))
    assert "invalid_file" in codes(filled)


@pytest.mark.parametrize(
    "damage",
    [
        "DELETE FROM fts_words WHERE rowid IN (SELECT rowid FROM chunks LIMIT 3)",
        # the trigram index holds only texts with CJK characters: an English one there is extra
        "INSERT INTO fts_trigram(rowid, body) SELECT rowid, text FROM chunks LIMIT 1",
    ],
)
def test_fts_mismatch(filled: Vault, damage: str) -> None:
    filled.conn.execute(damage)
    assert codes(filled) == ["fts_mismatch"]
    filled.check(fix=True)
    assert filled.check().ok


def test_stray_temp_file(filled: Vault) -> None:
    tmp = leaf_path(filled).parent / f"{TMP_PREFIX}dead-x.md"
    tmp.write_text("half")
    assert codes(filled) == ["stray_temp"]
    filled.check(fix=True)
    assert not tmp.exists()
    assert filled.check().ok


def test_pending_intent(filled: Vault) -> None:
    filled.layout.intent.mkdir(exist_ok=True)
    (filled.layout.intent / "x.json").write_text('{"paths": []}')
    assert codes(filled) == ["pending_intent"]
    filled.check(fix=True)
    assert filled.check().ok


def test_symlink_out_of_the_vault(filled: Vault, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.md").write_text("# elsewhere\n")
    (filled.layout.root / "sources" / "linked").symlink_to(outside)
    assert codes(filled) == ["outside_link"]
    assert not filled.check(fix=True).ok
    assert (outside / "x.md").exists()


def test_names_that_differ_only_in_case(filled: Vault) -> None:
    """Made on Linux by hand (or before source names were checked): one folder on macOS and Windows."""
    root = filled.layout.root
    (root / "Travel").mkdir()
    (root / "Travel" / "Kyoto.md").write_text("# Kyoto\n\nThe ryokan is booked for 12 March.\n")
    (root / "travel").mkdir()
    (root / "travel" / "kyoto.md").write_text("# kyoto\n\nTrain tickets bought.\n")
    (root / "travel" / "Packing.md").write_text("# Packing\n\nBring the rail pass.\n")
    twins = [p for p in filled.check().problems if p.code == "case_twin"]
    assert [(p.path, p.fixable) for p in twins] == [("Travel", False)]
    assert "'travel'" in twins[0].message
    after = filled.check(fix=True)
    assert [p.path for p in after.problems if p.code == "case_twin"] == ["Travel"]
    assert (root / "travel" / "kyoto.md").read_text() == "# kyoto\n\nTrain tickets bought.\n"
    assert (root / "Travel" / "Kyoto.md").exists()
