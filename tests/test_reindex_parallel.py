"""reindex parses leaf files in a process per core: the index it writes is the one a single process writes."""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers import make_vault, topic_records
from vaultmem import index, reindex
from vaultmem.reindex import ReindexReport
from vaultmem.vault import Vault


def _state(conn: sqlite3.Connection) -> dict[str, object]:
    state: dict[str, object] = {
        table: conn.execute(f"SELECT rowid, body FROM {table} ORDER BY rowid").fetchall()
        for table in ("fts_words", "fts_trigram", "fts_nav_words", "fts_nav_trigram")
    }
    state["rows"] = index.all_rows(conn)
    state["rowids"] = conn.execute("SELECT rowid, id FROM chunks ORDER BY rowid").fetchall()
    # ``seq`` counts on from one load to the next; the order it gives is what a reader sees.
    state["vectors"] = [
        tuple(r) for r in conn.execute("SELECT id, model, content_hash, vec FROM vectors ORDER BY seq")
    ]
    state["jobs"] = conn.execute("SELECT kind, dedupe_key FROM jobs ORDER BY dedupe_key").fetchall()
    state["match"] = conn.execute(
        "SELECT rowid FROM fts_words WHERE fts_words MATCH 'roses' ORDER BY rowid"
    ).fetchall()
    return state


def _rebuild(vault: Vault, monkeypatch: pytest.MonkeyPatch, cores: int) -> tuple[ReindexReport, dict]:
    monkeypatch.setattr(reindex, "_cores", lambda: cores)
    report = vault.reindex()
    return report, _state(vault.conn)


def test_a_process_per_core_gives_the_same_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with make_vault(tmp_path / "v", workers=1) as vault:
        vault.ingest_messages(topic_records(12))
        vault.flush()
        vault.compact()  # summaries: leaves get parents, levels get their own folders
        vault.ingest_messages(topic_records(3, start=100))  # some still pending in _fresh/
        sealed = next(leaf for leaf in vault.ls() if "/_fresh/" not in leaf.path)
        fresh = next(leaf for leaf in vault.ls() if "/_fresh/" in leaf.path)
        root = vault.layout.root
        # A copy under another name (a duplicate id) and a file that is not a leaf.
        shutil.copy(root / sealed.path, root / fresh.path.rsplit("/", 1)[0] / f"copy-{sealed.id}.md")
        (root / fresh.path).with_name(f"2024-01-01-broken-{'0' * 16}.md").write_text("no frontmatter\n")
        monkeypatch.setattr(reindex, "PARALLEL_MIN_LEAVES", 4)

        vault.work()  # vectors, and their sidecars
        one, single = _rebuild(vault, monkeypatch, cores=1)
        two, forked = _rebuild(vault, monkeypatch, cores=2)

    assert (one.processes, two.processes) == (1, 2)
    assert forked == single
    assert two == replace(one, processes=2)
    assert len(one.duplicates) == 1 and len(one.skipped) == 1
    assert one.leaves > 50 and one.summaries > 0 and single["vectors"] and single["match"]
