"""``db.side_write``: a search's bookkeeping (entity heat, the day a leaf was asked about) commits without
a sync of its own; every other write keeps ``synchronous = FULL``."""

from __future__ import annotations

from pathlib import Path

import pytest

from vaultmem import Vault, db
from vaultmem.embed import FakeEmbedder


def _sync(conn: object) -> int:
    return int(conn.execute("PRAGMA synchronous").fetchone()[0])  # type: ignore[attr-defined]


def test_a_side_write_commits_unsynced_and_puts_full_back(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "chunks.db")
    assert _sync(conn) == 2
    with db.side_write(conn):
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('k', 'v')")
        assert _sync(conn) == db.SYNC_NORMAL
    assert _sync(conn) == 2
    with db.atomic(conn):  # an ordinary write is synced as before
        assert _sync(conn) == 2
    with pytest.raises(RuntimeError), db.side_write(conn):
        raise RuntimeError("boom")
    assert _sync(conn) == 2
    with db.atomic(conn), db.side_write(conn):  # inside a transaction: the outer commit decides
        assert _sync(conn) == 2
    assert conn.execute("SELECT value FROM meta WHERE key = 'k'").fetchone()[0] == "v"
    conn.close()


def test_outside_wal_mode_a_side_write_stays_synced(tmp_path: Path) -> None:
    """In rollback-journal mode NORMAL can corrupt the file on a power cut: there it keeps FULL."""
    conn = db.connect(tmp_path / "chunks.db")
    conn.execute("PRAGMA journal_mode = DELETE")
    with db.side_write(conn):
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('k', 'v')")
        assert _sync(conn) == 2
    conn.close()


def test_a_searchs_heat_is_committed_without_a_sync_and_kept(tmp_path: Path) -> None:
    vault = Vault.init(tmp_path / "v", embedder=FakeEmbedder())
    said = ["We adopted a small grey kitten from the shelter and named her Miso.", "Miso is doing well."]
    vault.ingest_messages(
        [
            {
                "id": f"m{i}",
                "speaker": "Ben",
                "content": text,
                "ts": f"2024-02-1{i}T10:00:00Z",
                "session": "s1",
            }
            for i, text in enumerate(said)
        ],
        source="home",
    )
    vault.flush()
    statements: list[str] = []
    vault.conn.set_trace_callback(statements.append)
    vault.search("what did Ben adopt", k=3)
    vault.conn.set_trace_callback(None)
    commit = statements.index("COMMIT")
    assert "PRAGMA synchronous = 1" in statements[:commit]
    assert any("entity_heat" in s for s in statements[:commit])
    assert statements[commit + 1 :] and statements[commit + 1].startswith("PRAGMA synchronous = 2")
    assert _sync(vault.conn) == 2
    vault.close()
    reopened = Vault.open(tmp_path / "v", embedder=FakeEmbedder())
    row = reopened.conn.execute("SELECT queries FROM entity_heat WHERE entity = 'person:ben'").fetchone()
    assert row is not None and row[0] == 1
    reopened.close()
