"""chunks.db: the SQLite index (WAL), its schema and its migrations.

Owns the connection settings and the schema. Migrations are an ordered list of small named functions,
applied on open and recorded in ``migrations``; a migration is never edited once released, only
appended. The index is derived data: everything in it except the job queue can be rebuilt from the
vault's files (``reindex``). This module knows nothing about the vault's files; it does know its own: a damaged chunks.db is detected
(``is_damage``, ``quick_check``), moved aside whole (``set_aside``) and what no file can give back (the
job queue, entity heat) is salvaged from it when it can still be read (``salvage``, ``restore``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vaultmem import fsio
from vaultmem.errors import DiskFull, ReadOnlyVault, VaultLocked

Migration = Callable[[sqlite3.Connection], None]


def m001_chunks(conn: sqlite3.Connection) -> None:
    _script(
        conn,
        """
        CREATE TABLE chunks(
            rowid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            kind TEXT NOT NULL,
            path TEXT NOT NULL UNIQUE,
            source TEXT NOT NULL,
            input TEXT,
            session TEXT,
            source_id TEXT,
            message_ids TEXT NOT NULL DEFAULT '[]',
            seq INTEGER NOT NULL DEFAULT 0,
            role TEXT,
            speaker TEXT,
            ts TEXT,
            ts_end TEXT,
            status TEXT NOT NULL,
            score REAL NOT NULL DEFAULT 0,
            reasons TEXT NOT NULL DEFAULT '[]',
            tokens INTEGER NOT NULL DEFAULT 0,
            content_hash TEXT NOT NULL,
            redactions TEXT NOT NULL DEFAULT '[]',
            provenance TEXT NOT NULL DEFAULT '{}',
            text TEXT NOT NULL,
            parent TEXT,
            depth INTEGER NOT NULL DEFAULT 0,
            file_hash TEXT NOT NULL,
            file_size INTEGER NOT NULL,
            file_mtime_ns INTEGER NOT NULL
        );
        CREATE INDEX chunks_source ON chunks(source, session);
        CREATE INDEX chunks_ts ON chunks(ts);
        CREATE INDEX chunks_status ON chunks(status);
        """,
    )


def m002_fts(conn: sqlite3.Connection) -> None:
    # Two FTS5 indexes over the same text: unicode61 for words, trigram so CJK text without spaces
    # is searchable by substring. The indexed body carries the speaker name so "what did Caroline say"
    # matches her turns. Triggers keep both in step with ``chunks`` (rowid shared).
    _script(
        conn,
        """
        CREATE VIRTUAL TABLE fts_words USING fts5(body, tokenize='unicode61 remove_diacritics 2');
        CREATE VIRTUAL TABLE fts_trigram USING fts5(body, tokenize='trigram');
        CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
            INSERT INTO fts_words(rowid, body) VALUES (new.rowid, coalesce(new.speaker || ': ', '') || new.text);
            INSERT INTO fts_trigram(rowid, body) VALUES (new.rowid, new.text);
        END;
        CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
            DELETE FROM fts_words WHERE rowid = old.rowid;
            DELETE FROM fts_trigram WHERE rowid = old.rowid;
        END;
        CREATE TRIGGER chunks_au AFTER UPDATE OF text, speaker ON chunks BEGIN
            DELETE FROM fts_words WHERE rowid = old.rowid;
            DELETE FROM fts_trigram WHERE rowid = old.rowid;
            INSERT INTO fts_words(rowid, body) VALUES (new.rowid, coalesce(new.speaker || ': ', '') || new.text);
            INSERT INTO fts_trigram(rowid, body) VALUES (new.rowid, new.text);
        END;
        """,
    )


def m003_jobs(conn: sqlite3.Connection) -> None:
    _script(
        conn,
        """
        CREATE TABLE jobs(
            id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,
            payload TEXT NOT NULL DEFAULT '{}',
            dedupe_key TEXT,
            state TEXT NOT NULL DEFAULT 'queued',
            priority INTEGER NOT NULL DEFAULT 0,
            attempts INTEGER NOT NULL DEFAULT 0,
            max_attempts INTEGER NOT NULL DEFAULT 5,
            run_after REAL NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_until REAL,
            last_error TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE UNIQUE INDEX jobs_dedupe ON jobs(dedupe_key) WHERE dedupe_key IS NOT NULL;
        CREATE INDEX jobs_ready ON jobs(state, run_after, priority);
        """,
    )


def m004_meta(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")


def _script(conn: sqlite3.Connection, sql: str) -> None:
    """Run several statements inside the current transaction (``executescript`` would COMMIT first)."""
    statement = ""
    for line in sql.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            conn.execute(statement)
            statement = ""
    if statement.strip():
        conn.execute(statement)


def m005_vectors(conn: sqlite3.Connection) -> None:
    # A cache of the sidecars' vectors for search; ``seq`` grows on every write so readers can refresh
    # incrementally. Rebuilt from ``_embeddings.json`` files by reindex.
    _script(
        conn,
        """
        CREATE TABLE vectors(
            id TEXT PRIMARY KEY,
            model TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            vec BLOB NOT NULL,
            seq INTEGER NOT NULL
        );
        CREATE INDEX vectors_seq ON vectors(seq);
        CREATE TRIGGER chunks_vec_ad AFTER DELETE ON chunks BEGIN
            DELETE FROM vectors WHERE id = old.id;
        END;
        """,
    )


def m006_fts_porter(conn: sqlite3.Connection) -> None:
    # Porter stemming on the word index ("painted" finds "painting"): +0.02 context recall on LoCoMo dev.
    conn.execute("DROP TABLE fts_words")
    conn.execute(
        "CREATE VIRTUAL TABLE fts_words USING fts5(body, tokenize='porter unicode61 remove_diacritics 2')"
    )
    conn.execute(
        "INSERT INTO fts_words(rowid, body) SELECT rowid, coalesce(speaker || ': ', '') || text FROM chunks"
    )


def m007_fts_trigger_only_on_change(conn: sqlite3.Connection) -> None:
    # Status changes rewrite whole rows (upsert); re-indexing unchanged text doubled their cost.
    _script(
        conn,
        """
        DROP TRIGGER chunks_au;
        CREATE TRIGGER chunks_au AFTER UPDATE OF text, speaker ON chunks
        WHEN old.text IS NOT new.text OR old.speaker IS NOT new.speaker BEGIN
            DELETE FROM fts_words WHERE rowid = old.rowid;
            DELETE FROM fts_trigram WHERE rowid = old.rowid;
            INSERT INTO fts_words(rowid, body) VALUES (new.rowid, coalesce(new.speaker || ': ', '') || new.text);
            INSERT INTO fts_trigram(rowid, body) VALUES (new.rowid, new.text);
        END;
        """,
    )


def m008_vectors_model_index(conn: sqlite3.Connection) -> None:
    # Search checks the vector cache's freshness on every query: count and newest seq per model must come
    # from an index, not from a scan of rows that carry 1.5 KB blobs (387 ms -> ms at 100,000 leaves).
    conn.execute("CREATE INDEX vectors_model_seq ON vectors(model, seq)")


def m009_chunks_generation(conn: sqlite3.Connection) -> None:
    # A counter bumped whenever leaves appear, go, or change place in a conversation, so search can tell
    # in one row read whether its in-memory session order is still valid.
    _script(
        conn,
        """
        INSERT OR REPLACE INTO meta(key, value) VALUES ('chunks_gen', '0');
        CREATE TRIGGER chunks_gen_ai AFTER INSERT ON chunks BEGIN
            UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'chunks_gen';
        END;
        CREATE TRIGGER chunks_gen_ad AFTER DELETE ON chunks BEGIN
            UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'chunks_gen';
        END;
        CREATE TRIGGER chunks_gen_au AFTER UPDATE OF source, session, ts, kind, seq ON chunks
        WHEN old.source IS NOT new.source OR old.session IS NOT new.session OR old.ts IS NOT new.ts
            OR old.kind IS NOT new.kind OR old.seq IS NOT new.seq BEGIN
            UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'chunks_gen';
        END;
        """,
    )


def m010_order(conn: sqlite3.Connection) -> None:
    # A node's reading position among its siblings (the ``order`` key, a decimal number kept as text so
    # no precision is lost; sorted in Python by ``order.sibling_order``). A change of order moves a node
    # in its conversation, so it bumps ``chunks_gen`` like a change of time does.
    _script(
        conn,
        """
        ALTER TABLE chunks ADD COLUMN ord TEXT;
        CREATE TRIGGER chunks_gen_au_ord AFTER UPDATE OF ord ON chunks
        WHEN old.ord IS NOT new.ord BEGIN
            UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'chunks_gen';
        END;
        """,
    )


def m011_entities(conn: sqlite3.Connection) -> None:
    # The entity index. A leaf's ``entities`` (JSON list of canonical keys, from its frontmatter) is the
    # truth; ``mentions`` follows it through triggers, so every path that writes rows (ingest, extract,
    # reindex, the watcher, compaction moves) keeps it in step without knowing it exists.
    # ``entity_heat`` is not derived from files: it records what the vault saw and when (mentions as they
    # were admitted, queries as they were asked), so like the job queue it survives a reindex.
    _script(
        conn,
        """
        ALTER TABLE chunks ADD COLUMN entities TEXT NOT NULL DEFAULT '[]';
        CREATE TABLE mentions(
            entity TEXT NOT NULL,
            leaf TEXT NOT NULL,
            source TEXT NOT NULL,
            ts TEXT,
            PRIMARY KEY (entity, leaf)
        ) WITHOUT ROWID;
        CREATE INDEX mentions_leaf ON mentions(leaf);
        CREATE INDEX mentions_entity_source ON mentions(entity, source);
        CREATE TRIGGER chunks_ment_ai AFTER INSERT ON chunks WHEN new.entities <> '[]' BEGIN
            INSERT OR IGNORE INTO mentions(entity, leaf, source, ts)
                SELECT value, new.id, new.source, new.ts FROM json_each(new.entities);
        END;
        CREATE TRIGGER chunks_ment_ad AFTER DELETE ON chunks WHEN old.entities <> '[]' BEGIN
            DELETE FROM mentions WHERE leaf = old.id;
        END;
        CREATE TRIGGER chunks_ment_au AFTER UPDATE OF entities, source, ts ON chunks
        WHEN old.entities IS NOT new.entities OR old.source IS NOT new.source OR old.ts IS NOT new.ts BEGIN
            DELETE FROM mentions WHERE leaf = old.id;
            INSERT OR IGNORE INTO mentions(entity, leaf, source, ts)
                SELECT value, new.id, new.source, new.ts FROM json_each(new.entities);
        END;
        CREATE TABLE entity_heat(
            entity TEXT PRIMARY KEY,
            heat REAL NOT NULL,
            day TEXT NOT NULL,
            queries INTEGER NOT NULL DEFAULT 0
        );
        """,
    )


# Topic and digest nodes: navigation over leaves that live elsewhere, written from their sentences.
# The tokenizer of the word indexes (fts_words, fts_nav_words) since migration 006; search tokenizes its
# hits' texts with it to tell which hold a word.
WORDS_TOKENIZER = "porter unicode61 remove_diacritics 2"
NAV = "(substr({row}.path, 1, 7) = 'topics/' OR substr({row}.path, 1, 7) = 'global/')"


def m012_fts_nav(conn: sqlite3.Connection) -> None:
    # Topic and digest summaries repeat their leaves' central sentences; in the leaves' word index they
    # shifted BM25's document frequencies enough to cost multi-hop questions 0.016 of context recall on
    # LoCoMo. They get their own pair of FTS tables, searched beside the others when summaries are asked
    # for. The path never moves a row between the two kinds (topics and digests stay where they are).
    new, old = NAV.format(row="new"), NAV.format(row="old")
    _script(
        conn,
        f"""
        CREATE VIRTUAL TABLE fts_nav_words USING fts5(body, tokenize='porter unicode61 remove_diacritics 2');
        CREATE VIRTUAL TABLE fts_nav_trigram USING fts5(body, tokenize='trigram');
        DROP TRIGGER chunks_ai;
        DROP TRIGGER chunks_ad;
        DROP TRIGGER chunks_au;
        CREATE TRIGGER chunks_ai AFTER INSERT ON chunks WHEN NOT {new} BEGIN
            INSERT INTO fts_words(rowid, body) VALUES (new.rowid, coalesce(new.speaker || ': ', '') || new.text);
            INSERT INTO fts_trigram(rowid, body) VALUES (new.rowid, new.text);
        END;
        CREATE TRIGGER chunks_ai_nav AFTER INSERT ON chunks WHEN {new} BEGIN
            INSERT INTO fts_nav_words(rowid, body) VALUES (new.rowid, new.text);
            INSERT INTO fts_nav_trigram(rowid, body) VALUES (new.rowid, new.text);
        END;
        CREATE TRIGGER chunks_ad AFTER DELETE ON chunks WHEN NOT {old} BEGIN
            DELETE FROM fts_words WHERE rowid = old.rowid;
            DELETE FROM fts_trigram WHERE rowid = old.rowid;
        END;
        CREATE TRIGGER chunks_ad_nav AFTER DELETE ON chunks WHEN {old} BEGIN
            DELETE FROM fts_nav_words WHERE rowid = old.rowid;
            DELETE FROM fts_nav_trigram WHERE rowid = old.rowid;
        END;
        CREATE TRIGGER chunks_au AFTER UPDATE OF text, speaker ON chunks
        WHEN NOT {new} AND (old.text IS NOT new.text OR old.speaker IS NOT new.speaker) BEGIN
            DELETE FROM fts_words WHERE rowid = old.rowid;
            DELETE FROM fts_trigram WHERE rowid = old.rowid;
            INSERT INTO fts_words(rowid, body) VALUES (new.rowid, coalesce(new.speaker || ': ', '') || new.text);
            INSERT INTO fts_trigram(rowid, body) VALUES (new.rowid, new.text);
        END;
        CREATE TRIGGER chunks_au_nav AFTER UPDATE OF text ON chunks
        WHEN {new} AND old.text IS NOT new.text BEGIN
            DELETE FROM fts_nav_words WHERE rowid = old.rowid;
            DELETE FROM fts_nav_trigram WHERE rowid = old.rowid;
            INSERT INTO fts_nav_words(rowid, body) VALUES (new.rowid, new.text);
            INSERT INTO fts_nav_trigram(rowid, body) VALUES (new.rowid, new.text);
        END;
        DELETE FROM fts_words WHERE rowid IN (SELECT rowid FROM chunks c WHERE {NAV.format(row="c")});
        DELETE FROM fts_trigram WHERE rowid IN (SELECT rowid FROM chunks c WHERE {NAV.format(row="c")});
        INSERT INTO fts_nav_words(rowid, body) SELECT rowid, text FROM chunks c WHERE {NAV.format(row="c")};
        INSERT INTO fts_nav_trigram(rowid, body) SELECT rowid, text FROM chunks c WHERE {NAV.format(row="c")};
        """,
    )


def m013_agent_memory(conn: sqlite3.Connection) -> None:
    # The agent's own memory (core files, session notes, episodes, recipes: ``memindex``). Markdown
    # files are the truth; these rows are rebuilt from them by reindex. ``agent_entries`` holds the
    # searchable units (one per core-file entry, one per other file) and ``fts_agent`` indexes them;
    # ``agent_vectors`` caches embeddings of episode requests by text hash (recomputed when missing).
    _script(
        conn,
        """
        CREATE TABLE agent_files(
            path TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            name TEXT NOT NULL,
            meta TEXT NOT NULL DEFAULT '{}',
            text TEXT NOT NULL,
            ts TEXT,
            file_hash TEXT NOT NULL,
            file_size INTEGER NOT NULL,
            file_mtime_ns INTEGER NOT NULL
        );
        CREATE INDEX agent_files_kind ON agent_files(kind, name);
        CREATE TABLE agent_entries(
            rowid INTEGER PRIMARY KEY,
            path TEXT NOT NULL,
            kind TEXT NOT NULL,
            text TEXT NOT NULL
        );
        CREATE INDEX agent_entries_path ON agent_entries(path);
        CREATE VIRTUAL TABLE fts_agent USING fts5(
            text, content='agent_entries', content_rowid='rowid',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER agent_entries_ai AFTER INSERT ON agent_entries BEGIN
            INSERT INTO fts_agent(rowid, text) VALUES (new.rowid, new.text);
        END;
        CREATE TRIGGER agent_entries_ad AFTER DELETE ON agent_entries BEGIN
            INSERT INTO fts_agent(fts_agent, rowid, text) VALUES ('delete', old.rowid, old.text);
        END;
        CREATE TABLE agent_vectors(
            key TEXT PRIMARY KEY,
            model TEXT NOT NULL,
            text_hash TEXT NOT NULL,
            vec BLOB NOT NULL
        );
        """,
    )


def m014_count_indexes(conn: sqlite3.Connection) -> None:
    # Counts by kind, status, source and day (stats, the dashboard's metrics and heatmap) read these
    # indexes instead of every row: at 100,000 leaves a count went from a scan of the table to one of
    # an index (bench/dashboard.py).
    _script(
        conn,
        """
        CREATE INDEX chunks_kind_ts ON chunks(kind, ts, source);
        CREATE INDEX chunks_kind_source ON chunks(kind, source, status);
        """,
    )


def m015_job_kind_names(conn: sqlite3.Connection) -> None:
    # The ``extract`` job became ``admit`` and ``resummarize`` became ``resummarise`` (one spelling);
    # queued rows and their dedupe keys follow, so a job queued by an older version is neither lost nor
    # queued twice.
    for old, new in (("extract", "admit"), ("resummarize", "resummarise")):
        conn.execute(
            "UPDATE OR IGNORE jobs SET kind = ?, dedupe_key = CASE WHEN dedupe_key LIKE ? THEN ? || substr(dedupe_key, ?)"
            " ELSE dedupe_key END WHERE kind = ?",
            (new, f"{old}:%", f"{new}:", len(old) + 2, old),
        )


def m016_validity(conn: sqlite3.Connection) -> None:
    # Validity (issue #20): a leaf's ``valid_from`` / ``valid_to`` (ISO UTC text, so they compare as
    # text), the versions it replaces / that replace it (JSON lists of leaf ids), and ``ingested``, when
    # the vault learned it (``as_of``: what the vault held then). Partial indexes make
    # "does any leaf have a window" and "which leaves replace one" cheap in a vault where few do.
    # Rows of files written before (``Vault.supersede`` already wrote the links) are read again by
    # ``reindex`` or ``check --fix``. ``recall`` is the optional decay's memory (``decay.py``): the day a
    # leaf was last returned by a query; not derived from files, so a rebuilt index starts it afresh.
    _script(
        conn,
        """
        ALTER TABLE chunks ADD COLUMN valid_from TEXT;
        ALTER TABLE chunks ADD COLUMN valid_to TEXT;
        ALTER TABLE chunks ADD COLUMN supersedes TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE chunks ADD COLUMN superseded_by TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE chunks ADD COLUMN ingested TEXT;
        CREATE INDEX chunks_windowed ON chunks(id) WHERE valid_from IS NOT NULL OR valid_to IS NOT NULL;
        CREATE INDEX chunks_supersedes ON chunks(id) WHERE supersedes <> '[]';
        CREATE TABLE recall(id TEXT PRIMARY KEY, day TEXT NOT NULL) WITHOUT ROWID;
        """,
    )


# A text holds a CJK character (the ranges of ``search._CJK_RE``; SQLite's GLOB compares code points).
# Only such texts go into the trigram indexes: they are searched only for CJK runs, which no other text
# can contain.
CJK_GLOB = "*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]*"
HAS_CJK = "({text} GLOB '" + CJK_GLOB + "')"


def m018_trigram_cjk_only(conn: sqlite3.Connection) -> None:
    # Trigram-indexing every text was 72% of the FTS cost of an insert on English chat (bench/hotpath.py,
    # index.insert_rows), for an index only CJK queries read. Rows without CJK leave it.
    new = NAV.format(row="new")
    cjk = HAS_CJK.format(text="new.text")
    _script(
        conn,
        f"""
        DROP TRIGGER chunks_ai;
        DROP TRIGGER chunks_ai_nav;
        DROP TRIGGER chunks_au;
        DROP TRIGGER chunks_au_nav;
        CREATE TRIGGER chunks_ai AFTER INSERT ON chunks WHEN NOT {new} BEGIN
            INSERT INTO fts_words(rowid, body) VALUES (new.rowid, coalesce(new.speaker || ': ', '') || new.text);
            INSERT INTO fts_trigram(rowid, body) SELECT new.rowid, new.text WHERE {cjk};
        END;
        CREATE TRIGGER chunks_ai_nav AFTER INSERT ON chunks WHEN {new} BEGIN
            INSERT INTO fts_nav_words(rowid, body) VALUES (new.rowid, new.text);
            INSERT INTO fts_nav_trigram(rowid, body) SELECT new.rowid, new.text WHERE {cjk};
        END;
        CREATE TRIGGER chunks_au AFTER UPDATE OF text, speaker ON chunks
        WHEN NOT {new} AND (old.text IS NOT new.text OR old.speaker IS NOT new.speaker) BEGIN
            DELETE FROM fts_words WHERE rowid = old.rowid;
            DELETE FROM fts_trigram WHERE rowid = old.rowid;
            INSERT INTO fts_words(rowid, body) VALUES (new.rowid, coalesce(new.speaker || ': ', '') || new.text);
            INSERT INTO fts_trigram(rowid, body) SELECT new.rowid, new.text WHERE {cjk};
        END;
        CREATE TRIGGER chunks_au_nav AFTER UPDATE OF text ON chunks
        WHEN {new} AND old.text IS NOT new.text BEGIN
            DELETE FROM fts_nav_words WHERE rowid = old.rowid;
            DELETE FROM fts_nav_trigram WHERE rowid = old.rowid;
            INSERT INTO fts_nav_words(rowid, body) VALUES (new.rowid, new.text);
            INSERT INTO fts_nav_trigram(rowid, body) SELECT new.rowid, new.text WHERE {cjk};
        END;
        DELETE FROM fts_trigram WHERE rowid IN (SELECT rowid FROM chunks c WHERE NOT {HAS_CJK.format(text="c.text")});
        DELETE FROM fts_nav_trigram WHERE rowid IN (SELECT rowid FROM chunks c WHERE NOT {HAS_CJK.format(text="c.text")});
        """,
    )


def m019_chunks_gen_speaker(conn: sqlite3.Connection) -> None:
    # Search keeps the vault's speakers in memory until ``chunks_gen`` moves. A leaf's speaker corrected by
    # hand (the watcher or a reindex updates the row in place) changes who a query names, so it bumps the
    # counter like a move does; without it the speakers were stale until the next insert.
    _script(
        conn,
        """
        CREATE TRIGGER chunks_gen_au_speaker AFTER UPDATE OF speaker ON chunks
        WHEN old.speaker IS NOT new.speaker BEGIN
            UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'chunks_gen';
        END;
        """,
    )


def m020_speaker_index(conn: sqlite3.Connection) -> None:
    # Search lists the vault's speakers when a process first searches: without an index that read every
    # row of chunks (0.19-0.23 s at 100,000 leaves); by this index it seeks once per speaker.
    conn.execute("CREATE INDEX chunks_speaker ON chunks(speaker) WHERE speaker IS NOT NULL")


def m021_parent_index(conn: sqlite3.Connection) -> None:
    # `context` pulls in the leaves under the summaries it ranks (``parent IN (...)``): without an index
    # that read every leaf of the vault per call. Partial: a leaf still in ``_fresh/`` has no parent, so
    # ingest writes nothing to it.
    conn.execute("CREATE INDEX chunks_parent ON chunks(parent) WHERE parent IS NOT NULL")


def m022_graph_changes(conn: sqlite3.Connection) -> None:
    # The leaf graph (graph.py) is kept in memory and brought up to date from this log of the leaves whose
    # place in it changed: they appeared or went, moved to another source or session, stopped or started
    # being leaves, or had their entities rewritten (``mentions`` follows ``entities``; a rescan rewrites
    # them in place without moving ``chunks_gen``). Each insert cuts the log to its last 65,536 rows (one
    # row at a time, by primary key): a reader further behind than that reads the whole graph again.
    keep = "DELETE FROM graph_changes WHERE seq <= last_insert_rowid() - 65536;"
    _script(
        conn,
        f"""
        CREATE TABLE graph_changes(seq INTEGER PRIMARY KEY, leaf TEXT NOT NULL);
        CREATE TRIGGER graph_changes_ai AFTER INSERT ON chunks WHEN new.kind = 'leaf' BEGIN
            INSERT INTO graph_changes(leaf) VALUES (new.id);
            {keep}
        END;
        CREATE TRIGGER graph_changes_ad AFTER DELETE ON chunks WHEN old.kind = 'leaf' BEGIN
            INSERT INTO graph_changes(leaf) VALUES (old.id);
            {keep}
        END;
        CREATE TRIGGER graph_changes_au AFTER UPDATE OF kind, source, session, entities ON chunks
        WHEN (old.kind = 'leaf' OR new.kind = 'leaf') AND (old.kind IS NOT new.kind
            OR old.source IS NOT new.source OR old.session IS NOT new.session
            OR old.entities IS NOT new.entities) BEGIN
            INSERT INTO graph_changes(leaf) VALUES (new.id);
            {keep}
        END;
        """,
    )


def m024_graph_changes_order(conn: sqlite3.Connection) -> None:
    # The session order (``graph.SessionOrder``) follows the same log as the leaf graph: a leaf whose time
    # or seq changes moves in its conversation, and its size (``tokens``) weighs its neighbours' share.
    keep = "DELETE FROM graph_changes WHERE seq <= last_insert_rowid() - 65536;"
    _script(
        conn,
        f"""
        DROP TRIGGER IF EXISTS graph_changes_au;
        CREATE TRIGGER graph_changes_au AFTER UPDATE OF kind, source, session, entities, ts, seq, tokens
        ON chunks WHEN (old.kind = 'leaf' OR new.kind = 'leaf') AND (old.kind IS NOT new.kind
            OR old.source IS NOT new.source OR old.session IS NOT new.session
            OR old.entities IS NOT new.entities OR old.ts IS NOT new.ts OR old.seq IS NOT new.seq
            OR old.tokens IS NOT new.tokens) BEGIN
            INSERT INTO graph_changes(leaf) VALUES (new.id);
            {keep}
        END;
        """,
    )


MIGRATIONS: list[tuple[str, Migration]] = [
    ("001_chunks", m001_chunks),
    ("002_fts", m002_fts),
    ("003_jobs", m003_jobs),
    ("004_meta", m004_meta),
    ("005_vectors", m005_vectors),
    ("006_fts_porter", m006_fts_porter),
    ("007_fts_trigger_only_on_change", m007_fts_trigger_only_on_change),
    ("008_vectors_model_index", m008_vectors_model_index),
    ("009_chunks_generation", m009_chunks_generation),
    ("010_order", m010_order),
    ("011_entities", m011_entities),
    ("012_fts_nav", m012_fts_nav),
    ("013_agent_memory", m013_agent_memory),
    ("014_count_indexes", m014_count_indexes),
    ("015_job_kind_names", m015_job_kind_names),
    ("016_validity", m016_validity),
    ("018_trigram_cjk_only", m018_trigram_cjk_only),
    ("019_chunks_gen_speaker", m019_chunks_gen_speaker),
    ("020_speaker_index", m020_speaker_index),
    ("021_parent_index", m021_parent_index),
    ("022_graph_changes", m022_graph_changes),
    ("024_graph_changes_order", m024_graph_changes_order),
]


# What each AFTER INSERT trigger on ``chunks`` does, as one statement over every row with a rowid above
# ``:before`` (the rows just inserted). ``bulk_insert`` drops the triggers, inserts, runs these, and
# creates the triggers again from their own text, in the caller's transaction: FTS5 takes a batch of rows
# about 3x faster from one INSERT ... SELECT than from a trigger per row. A migration that adds or
# changes an insert trigger on ``chunks`` must change this table too (a test compares the two paths).
_NAV_C = NAV.format(row="c")
_CJK_C = HAS_CJK.format(text="c.text")
INSERT_TRIGGERS_AS_SETS: dict[str, tuple[str, ...]] = {
    "chunks_ai": (
        "INSERT INTO fts_words(rowid, body) SELECT rowid, coalesce(speaker || ': ', '') || text"
        f" FROM chunks c WHERE rowid > :before AND NOT {_NAV_C}",
        f"INSERT INTO fts_trigram(rowid, body) SELECT rowid, text FROM chunks c"
        f" WHERE rowid > :before AND NOT {_NAV_C} AND {_CJK_C}",
    ),
    "chunks_ai_nav": (
        f"INSERT INTO fts_nav_words(rowid, body) SELECT rowid, text FROM chunks c WHERE rowid > :before AND {_NAV_C}",
        f"INSERT INTO fts_nav_trigram(rowid, body) SELECT rowid, text FROM chunks c"
        f" WHERE rowid > :before AND {_NAV_C} AND {_CJK_C}",
    ),
    "chunks_gen_ai": (
        "UPDATE meta SET value = CAST(value AS INTEGER) + (SELECT count(*) FROM chunks WHERE rowid > :before)"
        " WHERE key = 'chunks_gen' AND EXISTS (SELECT 1 FROM chunks WHERE rowid > :before)",
    ),
    "chunks_ment_ai": (
        "INSERT OR IGNORE INTO mentions(entity, leaf, source, ts) SELECT j.value, c.id, c.source, c.ts"
        " FROM chunks c, json_each(c.entities) j WHERE c.rowid > :before AND c.entities <> '[]'"
        " ORDER BY c.rowid",
    ),
    "graph_changes_ai": (
        "INSERT INTO graph_changes(leaf) SELECT id FROM chunks WHERE rowid > :before AND kind = 'leaf'"
        " ORDER BY rowid",
        "DELETE FROM graph_changes WHERE seq <= (SELECT max(seq) FROM graph_changes) - 65536",
    ),
}
BULK_MIN_ROWS = 200  # below this the DDL (a schema change other connections re-read) costs more

# What each AFTER DELETE trigger on ``chunks`` does, as one statement over every row ``bulk_delete`` is
# about to delete (``{rows}``: a condition on the alias ``c``), run before the rows go. A migration that
# adds or changes a delete trigger on ``chunks`` must change this table too (a test compares the paths).
DELETE_TRIGGERS_AS_SETS: dict[str, tuple[str, ...]] = {
    "chunks_ad": tuple(
        f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM chunks c WHERE {{rows}} AND NOT {_NAV_C})"
        for table in ("fts_words", "fts_trigram")
    ),
    "chunks_ad_nav": tuple(
        f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM chunks c WHERE {{rows}} AND {_NAV_C})"
        for table in ("fts_nav_words", "fts_nav_trigram")
    ),
    "chunks_vec_ad": ("DELETE FROM vectors WHERE id IN (SELECT id FROM chunks c WHERE {rows})",),
    "chunks_gen_ad": (
        "UPDATE meta SET value = CAST(value AS INTEGER) + (SELECT count(*) FROM chunks c WHERE {rows})"
        " WHERE key = 'chunks_gen' AND EXISTS (SELECT 1 FROM chunks c WHERE {rows})",
    ),
    "chunks_ment_ad": (
        "DELETE FROM mentions WHERE leaf IN (SELECT id FROM chunks c WHERE {rows} AND c.entities <> '[]')",
    ),
    "graph_changes_ad": (
        "INSERT INTO graph_changes(leaf) SELECT id FROM chunks c WHERE {rows} AND c.kind = 'leaf'"
        " ORDER BY c.rowid",
        "DELETE FROM graph_changes WHERE seq <= (SELECT max(seq) FROM graph_changes) - 65536",
    ),
}


def _triggers(conn: sqlite3.Connection, event: str) -> dict[str, str]:
    return {
        name: sql
        for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'chunks'"
        )
        if f" AFTER {event} ON " in " ".join(sql.split()).upper()
    }


def insert_triggers(conn: sqlite3.Connection) -> dict[str, str]:
    """Name -> SQL of the AFTER INSERT triggers on ``chunks``."""
    return _triggers(conn, "INSERT")


def delete_triggers(conn: sqlite3.Connection) -> dict[str, str]:
    """Name -> SQL of the AFTER DELETE triggers on ``chunks``."""
    return _triggers(conn, "DELETE")


def bulk_delete(
    conn: sqlite3.Connection, rows: str = "1", params: Mapping[str, object] | None = None
) -> None:
    """Delete the rows of ``chunks`` for which ``rows`` holds (a condition on the alias ``c``, with named
    ``params``) with the delete triggers off, their work done once for all of them first
    (``DELETE_TRIGGERS_AS_SETS``): the rows go in rowid order, as the per-row triggers log them. Inside
    the caller's transaction, as ``bulk_insert``; a delete trigger this module does not know keeps the
    per-row path."""
    bound = dict(params or {})
    triggers = delete_triggers(conn)
    # Every row (``rows`` "1"): a DELETE without WHERE, which SQLite does by truncating the table and its
    # indexes instead of visiting each row, once the triggers are off.
    delete = (
        "DELETE FROM chunks"
        if rows == "1"
        else f"DELETE FROM chunks WHERE rowid IN (SELECT rowid FROM chunks c WHERE {rows})"
    )
    if not conn.in_transaction or set(triggers) - set(DELETE_TRIGGERS_AS_SETS):
        conn.execute(delete, bound)
        return
    with atomic(conn):
        for name in triggers:
            conn.execute(f"DROP TRIGGER {name}")
        for name in triggers:
            for statement in DELETE_TRIGGERS_AS_SETS[name]:
                conn.execute(statement.format(rows=rows), bound)
        conn.execute(delete, bound)
        for sql in triggers.values():
            conn.execute(sql)


def bulk_insert(conn: sqlite3.Connection, insert: Callable[[], object]) -> None:
    """Run ``insert`` (rows into ``chunks`` only) with the insert triggers off, then do their work once for
    all the new rows (``INSERT_TRIGGERS_AS_SETS``). Inside the caller's transaction: a reader or a crash
    sees the triggers, and the rows, as they were or as they are after. An insert trigger this module
    does not know (a newer migration) keeps the per-row path."""
    triggers = insert_triggers(conn)
    if not conn.in_transaction or set(triggers) - set(INSERT_TRIGGERS_AS_SETS):
        insert()
        return
    before = conn.execute("SELECT coalesce(max(rowid), 0) FROM chunks").fetchone()[0]
    with atomic(conn):
        for name in triggers:
            conn.execute(f"DROP TRIGGER {name}")
        insert()
        for name in triggers:
            for statement in INSERT_TRIGGERS_AS_SETS[name]:
                conn.execute(statement, {"before": before})
        for sql in triggers.values():
            conn.execute(sql)


def connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open chunks.db with the settings every connection uses, applying pending migrations."""
    try:
        if readonly:
            conn = _connect_ro(path)
        else:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, factory=Connection)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout = 10000")
        if not readonly:
            conn.execute("PRAGMA journal_mode = WAL")
            # FULL: each committed batch (one transaction) is on disk when commit returns.
            conn.execute("PRAGMA synchronous = FULL")
            migrate(conn)
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.OperationalError as exc:
        message = str(exc)
        if "readonly" in message or "unable to open" in message:
            raise ReadOnlyVault(f"cannot open {path} for writing: {message}") from exc
        if "locked" in message:
            raise VaultLocked(f"{path} is locked by another process: {message}") from exc
        if is_disk_full(exc, path):
            raise _full(exc) from exc
        raise
    return conn


def _connect_ro(path: Path) -> sqlite3.Connection:
    """A read-only connection. On read-only media SQLite cannot create the ``-shm`` file a WAL database
    is read with; then the file is opened as immutable (no locks, no log: what a clean close left)."""
    if not path.exists():
        raise sqlite3.OperationalError(f"unable to open database file {path}: it does not exist")
    uri = path.absolute().as_uri()  # percent-encoded: a '?' or '#' in a folder name stays a name
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:
        conn.close()
        conn = sqlite3.connect(
            f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None, check_same_thread=False
        )
    return conn


def applied_migrations(conn: sqlite3.Connection) -> list[str]:
    return [row[0] for row in conn.execute("SELECT name FROM migrations ORDER BY name")]


def migrate(conn: sqlite3.Connection) -> list[str]:
    conn.execute("CREATE TABLE IF NOT EXISTS migrations(name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    done = set(applied_migrations(conn))
    applied = []
    for name, fn in MIGRATIONS:
        if name in done:
            continue
        with atomic(conn):
            fn(conn)
            conn.execute("INSERT INTO migrations(name, applied_at) VALUES (?, ?)", (name, time.time()))
        applied.append(name)
    return applied


LOW_SPACE_BYTES = 1 << 20  # an I/O error with less than this free is taken for a full disk


def is_disk_full(exc: BaseException, path: Path | None = None) -> bool:
    """True for SQLite's "database or disk is full" (SQLITE_FULL), and for an I/O error while the disk
    holding ``path`` has (almost) no space left: growing the shared-memory file of the WAL on a full
    disk fails as SQLITE_IOERR, not SQLITE_FULL."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc):
        return True
    if path is None or "disk I/O error" not in str(exc):
        return False
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < LOW_SPACE_BYTES


def _full(exc: BaseException) -> DiskFull:
    return DiskFull(f"the disk holding the index is full ({exc})")


def _db_path(conn: sqlite3.Connection) -> Path | None:
    try:
        row = conn.execute("PRAGMA database_list").fetchone()
    except sqlite3.Error:
        return None
    return Path(row[2]) if row is not None and row[2] else None


def chunks_generation(conn: sqlite3.Connection) -> int:
    """The ``chunks_gen`` counter: moves whenever a node appears or goes, or a leaf changes place or speaker
    (the triggers of migrations 009, 010 and 019). What is built from the rows' places (session order,
    speakers, the leaf graph, the count of rows) is kept until it moves."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'chunks_gen'").fetchone()
    return int(row[0]) if row else 0


def write_stamp(conn: sqlite3.Connection) -> tuple[int, int, int] | None:
    """A value that changes whenever the index is written: by this connection (its change counter, less
    the changes of its ``side_write``s) or by any other (the file's data version). ``None`` inside a
    transaction (a rollback would not move the counter back), so what is remembered against a stamp is
    always a committed state."""
    if conn.in_transaction:
        return None
    changes = conn.total_changes - getattr(conn, "side_changes", 0)
    return (id(conn), int(conn.execute("PRAGMA data_version").fetchone()[0]), changes)


ANALYZE_FROM = 1_000  # chunks rows; below it SQLite's guesses read little whatever plan they pick


def analyze(conn: sqlite3.Connection) -> bool:
    """Give the query planner statistics of ``chunks`` (``ANALYZE``: ``sqlite_stat1``) from ``ANALYZE_FROM``
    rows, again whenever its highest rowid has doubled since (kept in ``meta`` as ``analyzed_rows``; the
    check is two lookups). Returns whether it analyzed.

    Without statistics SQLite guessed, and for ``kind = ? AND path`` range queries it chose a ``kind``
    index: every leaf of the vault read to find a folder's (at 100,000 leaves: 120 ms for a source's 10,000
    leaves, 13 ms by the path index; bench/plans.py). ``PRAGMA optimize`` does not analyze a table its own
    connection has not queried, and sampled statistics (``analysis_limit``) counted 1,001 rows per kind
    and kept the wrong plan; a whole ``ANALYZE chunks`` takes ~100 ms at 100,000 rows, and each doubling
    of the vault pays it once."""
    rows = int(conn.execute("SELECT coalesce(max(rowid), 0) FROM chunks").fetchone()[0])
    if rows < ANALYZE_FROM:
        return False
    done = conn.execute("SELECT value FROM meta WHERE key = 'analyzed_rows'").fetchone()
    if (
        done is not None
        and rows <= 2 * int(done[0])
        and conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone()
    ):
        return False
    with atomic(conn):
        conn.execute("ANALYZE chunks")
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('analyzed_rows', ?)", (str(rows),))
    return True


SYNC_NORMAL = 1  # ``PRAGMA synchronous`` values: 1 NORMAL, 2 FULL


def _wal(conn: sqlite3.Connection) -> bool:
    return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"


class Connection(sqlite3.Connection):
    """``sqlite3.Connection`` counting the changes its ``side_write``s made (``connect`` opens these)."""

    side_changes = 0


@contextmanager
def side_write(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``atomic`` for bookkeeping that nothing remembered against ``write_stamp`` reads (a query's entity
    heat, the day a leaf was last asked about): its changes do not move the stamp, so a search's writes
    leave what searches remember (word counts, a filter's rows, the quote check) in place. Only a
    connection opened by ``connect`` keeps the count; on any other the stamp moves as for any write.

    Advisory, so not worth a sync on the search path: outside a transaction, in WAL mode, it commits
    with ``synchronous = NORMAL`` (the WAL is written but not synced; the next FULL commit or checkpoint
    syncs it too, and a power cut can lose only these last bookkeeping writes, never the index's
    consistency). At 100,000 leaves the sync was ~4 ms of a search's ~20 under load."""
    before = conn.total_changes
    restore = None  # the connection's own value, put back after a relaxed commit
    if not conn.in_transaction and _wal(conn):  # NORMAL risks corruption in rollback-journal mode
        level = int(conn.execute("PRAGMA synchronous").fetchone()[0])
        if level > SYNC_NORMAL:
            restore = level
            conn.execute(f"PRAGMA synchronous = {SYNC_NORMAL}")
    try:
        with atomic(conn):
            yield conn
    finally:
        if restore is not None:
            conn.execute(f"PRAGMA synchronous = {restore}")
        if isinstance(conn, Connection):
            conn.side_changes += conn.total_changes - before


@contextmanager
def atomic(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction (BEGIN IMMEDIATE ... COMMIT), rolled back on any exception (a failed COMMIT
    included); nests as savepoints. A full disk is raised as ``DiskFull``, the transaction undone."""
    if conn.in_transaction:
        name = f"sp{id(conn)}_{time.monotonic_ns()}"
        conn.execute(f"SAVEPOINT {name}")
        try:
            yield conn
        except BaseException as exc:
            # SQLite may already have rolled the whole transaction back (it may on a full disk).
            with contextlib.suppress(sqlite3.Error):
                conn.execute(f"ROLLBACK TO {name}")
                conn.execute(f"RELEASE {name}")
            if isinstance(exc, sqlite3.OperationalError) and is_disk_full(exc, _db_path(conn)):
                raise _full(exc) from exc
            raise
        conn.execute(f"RELEASE {name}")
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError) and is_disk_full(exc, _db_path(conn)):
            raise _full(exc) from exc
        raise


# -- a damaged index ----------------------------------------------------------------------------------

_CORRUPT_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_CORRUPT_WORDS = ("malformed", "not a database", "vtable constructor failed", "corrupt")


class DamagedLog(sqlite3.DatabaseError):
    """The write-ahead log is damaged (``wal_problem``): SQLite itself would drop part of it silently."""


def is_damage(exc: BaseException) -> bool:
    """Whether an SQLite error says the database file itself is damaged (not locked, read-only or full)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    if isinstance(exc, DamagedLog):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _CORRUPT_CODES:
        return True
    return any(word in str(exc) for word in _CORRUPT_WORDS)


PROBED_TABLES = (
    "chunks",
    "vectors",
    "jobs",
    "meta",
    "mentions",
    "entity_heat",
    "fts_words",
    "fts_trigram",
    "fts_nav_words",
    "fts_nav_trigram",
)


def probe(conn: sqlite3.Connection) -> None:
    """Read the first row of every table (each root page, and each FTS table's structure record): a cheap
    check on open that catches a damaged header or schema at once. Damage deeper in a table shows when
    it is read; ``quick_check`` finds it all."""
    for table in PROBED_TABLES:
        conn.execute(f"SELECT * FROM {table} LIMIT 1").fetchall()


def quick_check(path: Path) -> str | None:
    """None when ``path`` passes ``PRAGMA quick_check`` (every page and index of the b-trees); else what
    is wrong. Reads the whole file: run by ``reindex`` and ``check`` and when opening failed, not on
    every open (costs in docs/architecture.md)."""
    try:
        conn = _connect_ro(path)
        try:
            found = [str(r[0]) for r in conn.execute("PRAGMA quick_check").fetchall()]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        return str(exc)
    return None if found == ["ok"] else "; ".join(found[:3])


_WAL_MAGIC = (0x377F0682, 0x377F0683)


def _wal_checksum(data: bytes, big_endian: bool) -> tuple[int, int]:
    s0 = s1 = 0
    fmt = ">" if big_endian else "<"
    for x0, x1 in struct.iter_unpack(fmt + "II", data):
        s0 = (s0 + x0 + s1) & 0xFFFFFFFF
        s1 = (s1 + x1 + s0) & 0xFFFFFFFF
    return s0, s1


def wal_problem(path: Path) -> str | None:
    """What is wrong with the write-ahead log beside ``path``, by its headers alone (cheap enough for
    every open). SQLite reads a WAL up to its first bad frame and silently drops the rest, so a damaged
    WAL would leave the index behind the files. Healthy: no WAL, an empty one, or a valid header followed
    by the frames of the current generation (its salt) and then, after a checkpoint restarted the log,
    older frames. Damaged: an invalid header, or a frame of the current generation after one that is
    not (the log is only ever appended to). A frame whose header survived but whose page did not is not
    seen here; ``check`` then reports the rows it lost."""
    wal = Path(f"{path}-wal")
    try:
        with wal.open("rb") as f:
            header = f.read(32)
            if not header:
                return None
            if len(header) < 32:
                return "the write-ahead log is shorter than its header"
            magic, _version, page_size, _seq, salt1, salt2, c1, c2 = struct.unpack(">8I", header)
            if magic not in _WAL_MAGIC or _wal_checksum(header[:24], magic & 1 == 1) != (c1, c2):
                return "the write-ahead log's header is damaged"
            if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
                return "the write-ahead log's header names an impossible page size"
            current, gap = True, False
            while True:
                frame = f.read(24)
                if len(frame) < 24:
                    return None
                same = struct.unpack(">II", frame[8:16]) == (salt1, salt2)
                if same and not current:
                    gap = True
                    break
                current = current and same
                f.seek(page_size, os.SEEK_CUR)
    except FileNotFoundError:
        return None
    return "a frame of the write-ahead log is damaged" if gap else None


def set_aside(path: Path, stamp: str) -> Path:
    """Move a damaged database and its ``-wal`` / ``-shm`` aside as ``<name>.damaged-<stamp>`` (kept for
    a person to look at, never deleted); returns the new path of the main file. A second damage within the
    same second (a rebuilt index damaged again at once) gets ``<stamp>-2``, ``-3``...: nothing kept is
    overwritten and the move never fails for a name already taken."""
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while any(Path(f"{target}{s}").exists() for s in ("", "-wal", "-shm")):
        n += 1
        target = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    moves = [(Path(f"{path}{s}"), Path(f"{target}{s}")) for s in ("", "-wal", "-shm")]
    fsio.move_files(path.parent, [(source, dest) for source, dest in moves if source.exists()])
    return target


@dataclass
class Salvage:
    """Rows read back from a damaged index: the tables no file can rebuild."""

    rows: dict[str, tuple[list[str], list[tuple[Any, ...]]]] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)  # tables that could not be read


SALVAGED_TABLES = ("jobs", "entity_heat")


def _valid(table: str, row: dict[str, Any]) -> bool:
    try:
        if table == "jobs":
            return isinstance(json.loads(row["payload"]), dict) and row["state"] in {
                "queued",
                "running",
                "parked",
            }
        return isinstance(row["heat"], float | int) and isinstance(row["day"], str)
    except (KeyError, TypeError, ValueError):
        return False


def salvage(path: Path) -> Salvage:
    """The job queue and entity heat of a damaged index, where they can still be read (row by row
    checked, a table that cannot be read whole counts as lost)."""
    out = Salvage()
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.DatabaseError:
        out.lost = list(SALVAGED_TABLES)
        return out
    try:
        for table in SALVAGED_TABLES:
            try:
                cursor = conn.execute(f"SELECT * FROM {table}")
                columns = [d[0] for d in cursor.description]
                rows = [r for r in cursor.fetchall() if _valid(table, dict(zip(columns, r, strict=True)))]
            except sqlite3.DatabaseError:
                out.lost.append(table)
                continue
            out.rows[table] = (columns, rows)
    finally:
        conn.close()
    return out


def restore(conn: sqlite3.Connection, salvaged: Salvage) -> dict[str, int]:
    """Put salvaged rows into a fresh index (rows that clash with ones already there are skipped)."""
    counts: dict[str, int] = {}
    with atomic(conn):
        for table, (columns, rows) in salvaged.rows.items():
            present = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            keep = [c for c in columns if c in present]
            at = [columns.index(c) for c in keep]
            before = conn.total_changes
            conn.executemany(
                f"INSERT OR IGNORE INTO {table}({', '.join(keep)}) VALUES ({', '.join('?' * len(keep))})",
                [tuple(row[i] for i in at) for row in rows],
            )
            counts[table] = conn.total_changes - before
    return counts
