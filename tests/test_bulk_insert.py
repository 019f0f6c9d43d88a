"""A large batch of rows goes in with the insert triggers off and their work done once (``db.bulk_insert``):
the index it leaves must be the one the per-row triggers leave."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from vaultmem import db, index
from vaultmem.db import atomic
from vaultmem.model import Leaf


def _rows(n: int, first: int = 0) -> list[tuple[object, ...]]:
    texts = [
        "Caroline went to the LGBTQ support group on Tuesday and said it was powerful.",
        "我们下周去京都旅行，记得订酒店。",
        "Melanie painted a sunrise over the lake last year.",
        "Re: invoice 4471 is paid, thanks! The 東京 office confirmed.",
    ]
    rows = []
    for i in range(first, first + n):
        nav = i % 7 == 3  # a topic page's sentences go to the navigation indexes
        leaf = Leaf(
            id=f"{i:016x}",
            source="chat",
            text=f"{texts[i % len(texts)]} ({i})",
            path=f"topics/person-caroline/{i:05d}.md" if nav else f"sources/chat/_fresh/{i:05d}.md",
            session=f"s{i // 50}",
            speaker=None if i % 5 == 0 else ("Caroline" if i % 2 else "Melanie"),
            ts=datetime(2026, 3, 1 + i % 28, 12, tzinfo=UTC),
            entities=("person:caroline", "project:kyoto-trip") if i % 3 == 0 else (),
        )
        rows.append(index.leaf_row(leaf, index.FileStamp("0" * 64, 10, i)))
    return rows


def _state(conn: sqlite3.Connection) -> dict[str, object]:
    state: dict[str, object] = {
        table: conn.execute(f"SELECT rowid, body FROM {table} ORDER BY rowid").fetchall()
        for table in ("fts_words", "fts_trigram", "fts_nav_words", "fts_nav_trigram")
    }
    state["mentions"] = conn.execute("SELECT * FROM mentions ORDER BY entity, leaf").fetchall()
    state["gen"] = db.chunks_generation(conn)
    state["graph_changes"] = conn.execute("SELECT seq, leaf FROM graph_changes ORDER BY seq").fetchall()
    state["schema"] = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    # The words are searchable, not only stored: a MATCH through the index.
    state["match"] = conn.execute(
        "SELECT rowid FROM fts_words WHERE fts_words MATCH 'caroline' ORDER BY rowid"
    ).fetchall()
    state["cjk"] = conn.execute(
        "SELECT rowid FROM fts_trigram WHERE fts_trigram MATCH '京都旅' ORDER BY rowid"
    ).fetchall()
    return state


def _filled(path: Path, bulk: bool) -> dict[str, object]:
    conn = db.connect(path)
    with atomic(conn):
        conn.executemany(index._INSERT, _rows(30))  # rows already there: only the new ones are added
    with atomic(conn):
        if bulk:
            db.bulk_insert(conn, lambda: conn.executemany(index._INSERT, _rows(500, first=30)))
        else:
            conn.executemany(index._INSERT, _rows(500, first=30))
    state = _state(conn)
    conn.close()
    return state


def test_bulk_insert_leaves_the_index_the_triggers_leave(tmp_path: Path) -> None:
    per_row = _filled(tmp_path / "a.db", bulk=False)
    bulk = _filled(tmp_path / "b.db", bulk=True)
    assert len(per_row["fts_words"]) > 400 and per_row["fts_nav_words"] and per_row["fts_trigram"]  # type: ignore[arg-type]
    assert per_row["mentions"] and per_row["match"] and per_row["cjk"]
    assert len(per_row["graph_changes"]) == 530  # type: ignore[arg-type]
    assert bulk == per_row


def test_every_insert_trigger_has_its_set_form(tmp_path: Path) -> None:
    """A migration that adds an insert trigger on ``chunks`` must say what it does for a batch."""
    conn = db.connect(tmp_path / "c.db")
    assert set(db.insert_triggers(conn)) == set(db.INSERT_TRIGGERS_AS_SETS)
    conn.close()


def test_a_failed_batch_keeps_the_triggers(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "d.db")
    before = db.insert_triggers(conn)
    rows = _rows(300)
    with pytest.raises(sqlite3.IntegrityError), atomic(conn):
        index.insert_rows(conn, [*rows, rows[0]])  # the same id twice
    assert db.insert_triggers(conn) == before
    assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0
    with atomic(conn):
        index.insert_rows(conn, rows[:2])  # the per-row path still fills the word index
    assert conn.execute("SELECT count(*) FROM fts_words").fetchone()[0] == 2
    conn.close()


def _emptied(path: Path, bulk: bool, rows: str) -> dict[str, object]:
    """530 rows with vectors for two in three, then the rows where ``rows`` holds deleted per row by the
    triggers or in one set (``db.bulk_delete``)."""
    conn = db.connect(path)
    with atomic(conn):
        index.insert_rows(conn, _rows(530))
        conn.executemany(
            "INSERT INTO vectors(id, model, content_hash, vec, seq) VALUES (?, 'm', 'h', x'00', ?)",
            [(f"{i:016x}", i) for i in range(530) if i % 3],
        )
    with atomic(conn):
        if bulk:
            db.bulk_delete(conn, rows)
        else:
            conn.execute(f"DELETE FROM chunks WHERE rowid IN (SELECT rowid FROM chunks c WHERE {rows})")
    state = _state(conn)
    state["chunks"] = conn.execute("SELECT rowid, id FROM chunks ORDER BY rowid").fetchall()
    state["vectors"] = conn.execute("SELECT id, seq FROM vectors ORDER BY id").fetchall()
    conn.close()
    return state


@pytest.mark.parametrize("rows", ["1", "c.session IN ('s1', 's4') OR c.rowid % 7 = 3"])
def test_bulk_delete_leaves_the_index_the_triggers_leave(tmp_path: Path, rows: str) -> None:
    per_row = _emptied(tmp_path / "a.db", bulk=False, rows=rows)
    bulk = _emptied(tmp_path / "b.db", bulk=True, rows=rows)
    # the deleted rows left the FTS tables, mentions and vectors, and were logged once each, in order
    assert len(per_row["graph_changes"]) > 530  # type: ignore[arg-type]
    if rows == "1":
        assert not per_row["chunks"] and not per_row["vectors"] and not per_row["fts_words"]
    else:
        assert per_row["chunks"] and per_row["vectors"] and per_row["fts_nav_words"] and per_row["mentions"]
        assert len(per_row["chunks"]) < 400  # type: ignore[arg-type]
    assert bulk == per_row


def test_every_delete_trigger_has_its_set_form(tmp_path: Path) -> None:
    """A migration that adds a delete trigger on ``chunks`` must say what it does for a set of rows."""
    conn = db.connect(tmp_path / "c.db")
    assert set(db.delete_triggers(conn)) == set(db.DELETE_TRIGGERS_AS_SETS)
    conn.close()


def test_bulk_delete_of_every_row_truncates_instead_of_visiting_each_row(tmp_path: Path) -> None:
    """``rows`` "1" (every row, as reindex asks): one DELETE without WHERE, which SQLite does by
    truncating the table and its indexes once the triggers are off (same result: the test above)."""
    conn = db.connect(tmp_path / "t.db")
    with atomic(conn):
        index.insert_rows(conn, _rows(300))
    said: list[str] = []
    conn.set_trace_callback(said.append)
    with atomic(conn):
        db.bulk_delete(conn, "1")
    conn.set_trace_callback(None)
    deletes = [s for s in said if s.startswith("DELETE FROM chunks")]
    assert deletes == ["DELETE FROM chunks"], deletes
    assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0
    conn.close()


def test_reindex_empties_the_vectors_wholesale_before_the_rows_go(tmp_path: Path) -> None:
    """Reindex loads every vector again from the sidecars: the table is emptied in one statement first,
    so the delete triggers' set form finds nothing to delete row by row; the vectors come back."""
    from tests.helpers import chat
    from vaultmem import Vault
    from vaultmem.embed import FakeEmbedder

    vault = Vault.init(tmp_path / "v", embedder=FakeEmbedder())
    vault.ingest_messages(chat(30))
    vault.flush()
    before = vault.conn.execute("SELECT id, vec FROM vectors ORDER BY id").fetchall()
    said: list[str] = []
    vault.conn.set_trace_callback(said.append)
    report = vault.reindex()
    vault.conn.set_trace_callback(None)
    wholesale = said.index("DELETE FROM vectors")
    per_id = next(i for i, s in enumerate(said) if s.startswith("DELETE FROM vectors WHERE id IN"))
    assert wholesale < per_id
    assert report.vectors == len(before) == 30
    assert [tuple(r) for r in vault.conn.execute("SELECT id, vec FROM vectors ORDER BY id")] == [
        tuple(r) for r in before
    ]
    vault.close()
